package vulkan

// SetSubgroups turns the subgroup kernel variants off or back on (where the
// device has them), so tests run the portable ones too; it returns the
// previous setting.
func SetSubgroups(b *Backend, on bool) bool {
	old := b.subgroups
	b.subgroups = on && b.phys.subgroupArithmetic()
	return old
}

// SetStagingCap changes how much host data one submission may stage and
// returns the previous bound.
func SetStagingCap(n uint64) uint64 {
	old := stagingCap
	stagingCap = n
	return old
}

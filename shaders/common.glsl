// Shared helpers. Kernels that span more rows or elements than one grid
// dimension allows (65535 groups) take a 2-D grid: groupIndex() linearises it.

uint groupIndex() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// gridStride is the step of a grid-stride loop over elements.
uint gridStride() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x; }

uint globalIndex() { return groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x; }

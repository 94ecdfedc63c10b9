// The groups table of a MatMulExperts (GROUPED): for each row of tiles,
// three words: its first row, the end of its expert's rows and the expert;
// then, for each weight, a word per expert: where its matrix starts in the
// binding the experts share (kernels.go's groupTable). The including kernel
// defines GROUPS_BINDING and the spec constant GROUPED.
layout(std430, binding = GROUPS_BINDING) readonly buffer Groups { uint groups[]; };

uint wBase = 0u; // formats/select.glsl's W_BASE
uint mEnd;       // rows of X past the tile's group are outside it
#define W_BASE wBase

// groupRows sets the tile's row limit and weight from entry i of the table
// and returns its first row.
uint groupRows(uint i, uint basesBase) {
    mEnd = groups[3 * i + 1];
    wBase = groups[basesBase + groups[3 * i + 2]];
    return groups[3 * i];
}

// A dispatch's part of a MatMulExperts' groups table (GROUPED): for each
// row of tiles, three words: its first row, the end of its expert's rows
// and the expert; then a word per expert, from basesBase: where its weight
// starts in the binding (experts.go). The including kernel defines
// GROUPS_BINDING and the spec constant GROUPED.
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

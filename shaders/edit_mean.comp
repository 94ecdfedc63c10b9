#version 450
#extension GL_GOOGLE_include_directive : require
// Sets every row of a strided view of x to the rows' mean, one invocation
// per column, with a compensated sum so the mean is as exact as float allows.
layout(local_size_x = 64) in;
#include "common.glsl"

layout(push_constant) uniform Push {
    uint off, rows, cols, stride;
} pc;

layout(std430, binding = 0) buffer X { float x[]; };

void main() {
    for (uint c = globalIndex(); c < pc.cols; c += gridStride()) {
        precise float sum = 0.0, comp = 0.0;
        for (uint r = 0; r < pc.rows; r++) {
            precise float y = x[pc.off + r * pc.stride + c] - comp;
            precise float t = sum + y;
            comp = (t - sum) - y;
            sum = t;
        }
        float mean = sum / float(pc.rows);
        for (uint r = 0; r < pc.rows; r++) {
            x[pc.off + r * pc.stride + c] = mean;
        }
    }
}

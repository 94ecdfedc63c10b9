// Attention's mask and score cap, shared by scores.comp and flash.comp.

// visible: the query at position p sees key j (causal, and within window
// positions when window is not 0).
bool visible(uint p, uint j, uint window) {
    return j <= p && (window == 0 || p - j < window);
}

// capped is cap * tanh(x / cap), or x when cap is 0. tanh is written with
// one exponential of a non-positive number, which cannot overflow, and near
// 0, where 1 - e would cancel, as its series (to 2e-11 relative below 0.1).
float capped(float x, float cap) {
    if (cap == 0.0) {
        return x;
    }
    float y = x / cap, a = abs(y), t;
    if (a < 0.1) {
        float a2 = a * a;
        t = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 - a2 * 17.0 / 315.0)));
    } else {
        float e = exp(-2.0 * a);
        t = (1.0 - e) / (1.0 + e);
    }
    return cap * sign(y) * t;
}

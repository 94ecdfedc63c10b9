//go:build !race

package engine_test

// raceDetector says whether the tests run under -race, whose shadow memory
// changes what a memory measurement sees.
const raceDetector = false

//go:build race

package otelredlock

const raceEnabled = true

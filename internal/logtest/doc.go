// Package logtest is a log/slog handler for tests that holds a program to
// the rule that each attribute appears once per line: a layer adds only
// its own attributes, and values that change (a turn, a step) are passed
// per line rather than bound once and repeated. A line that repeats a key
// (through With, WithGroup and the record's own attributes) fails the
// test, naming the line.
//
// It owns the check only: what a line says, and whether it is written,
// is the program's. ForTest gives a test such a logger; cli's tests run
// every command through one, and the integration tests hold the text
// logs of the real binary to the same rule.
package logtest

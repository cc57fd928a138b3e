package events

// HeaderKey is headerKey, for tests.
var HeaderKey = headerKey

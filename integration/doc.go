// Package integration holds jetloop's end-to-end tests: real embedded NATS
// servers and clusters, the jetloop binary run as a subprocess, crashes by
// kill -9. It imports the other packages and is imported by none.
package integration

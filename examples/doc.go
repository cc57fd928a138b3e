// Package examples holds the example agent definitions that `jetloop dev`
// applies at start (an agent already stored is left as it is): a
// pull request reviewer, an agent answering @jetloop mentions in issue
// comments, a demo agent answering user requests, and an implementer
// whose change two reviewers review from its diff alone and a fixer
// fixes, all on the scripted model so they run without an API key.
package examples

import "embed"

// FS holds the example definitions, one agent a .yaml file.
//
//go:embed *.yaml
var FS embed.FS

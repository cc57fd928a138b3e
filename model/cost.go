package model

import (
	"github.com/jetloop/jetloop/model/prices"
)

// Price is a model's list price in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok" yaml:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok" yaml:"output_per_mtok"`
}

// Cost is what u costs at p, in US dollars.
func (p Price) Cost(u Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok + float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}

// LookupPrice finds the list price of a model by its provider name
// (package prices keeps the table). It accepts dated snapshots
// ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06"), "-latest" aliases
// and a router's vendor prefix ("openai/gpt-4o"); anything else must
// match exactly, so a new model is reported unknown rather than priced as
// an older one.
func LookupPrice(name string) (Price, bool) {
	p, ok := prices.Lookup(name)
	return Price(p), ok
}

// Cost is what u costs on the named model at its list price. An unknown
// model (a local one, or one newer than the table) costs 0 and reports
// false, so a caller can warn that a cost budget does not see it.
func Cost(modelName string, u Usage) (float64, bool) {
	p, ok := LookupPrice(modelName)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

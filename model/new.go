package model

import (
	"fmt"

	"github.com/jetloop/jetloop/policies"
)

// providers lists the provider names New accepts, for its errors.
var providers = []string{ProviderScripted, ProviderAnthropic, ProviderOpenAI}

// New makes the provider spec.Provider names from a definition's model
// section. Options configure the HTTP providers (client, key lookup,
// retries, limits, logging) and the price of every provider.
func New(spec policies.Model, opts ...Option) (Model, error) {
	switch spec.Provider {
	case ProviderScripted:
		o, err := buildOptions(opts)
		if err != nil {
			return nil, err
		}
		s, err := NewScripted(spec)
		if err != nil {
			return nil, err
		}
		if o.price != nil {
			s.price, s.priced = *o.price, true
		}
		s.metrics = o.metrics
		return s, nil
	case ProviderAnthropic:
		return NewAnthropic(spec, opts...)
	case ProviderOpenAI:
		return NewOpenAI(spec, opts...)
	case "":
		return nil, fmt.Errorf("model: provider: empty; want one of %v", providers)
	default:
		return nil, fmt.Errorf("model: provider: unknown %q; want one of %v", spec.Provider, providers)
	}
}

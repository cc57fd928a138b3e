package model

import (
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/policies"
)

// providers lists the provider names New accepts, for its errors.
var providers = []string{ProviderScripted, ProviderAnthropic, ProviderOpenAI}

// New makes the provider spec.Provider names from a definition's model
// section. Options configure the HTTP providers (client, key lookup,
// retries, limits, logging) and the price of every provider.
func New(spec policies.Model, opts ...Option) (Model, error) {
	if p := spec.Price; p != nil {
		// The definition's price, before the caller's options: an
		// operator's WithPrice still wins.
		opts = append([]Option{WithPrice(Price{InputPerMTok: p.InputPerMTok, OutputPerMTok: p.OutputPerMTok})}, opts...)
	}
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

// KeyEnv names the environment variable spec's provider reads its API
// key from, and whether it needs one: anthropic always (default
// ANTHROPIC_API_KEY); openai for api.openai.com and whenever api_key_env
// is set (default OPENAI_API_KEY; a local server at another base_url may
// take no key); scripted never. New fails for a needed key that is not
// set; `jetloop apply` warns when it is not set where it runs.
func KeyEnv(spec policies.Model) (env string, needed bool) {
	switch spec.Provider {
	case ProviderAnthropic:
		if spec.APIKeyEnv != "" {
			return spec.APIKeyEnv, true
		}
		return DefaultAnthropicKeyEnv, true
	case ProviderOpenAI:
		if spec.APIKeyEnv != "" {
			return spec.APIKeyEnv, true
		}
		official := spec.BaseURL == ""
		if ep, err := openAIEndpoint(spec.BaseURL); err == nil && strings.Contains(ep, "://api.openai.com/") {
			official = true
		}
		return DefaultOpenAIKeyEnv, official
	}
	return "", false
}

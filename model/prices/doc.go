// Package prices owns the list prices of the common models, in US dollars
// per million tokens, that model prices usage with and that policies
// checks a definition's spend limits against (a limit on a model that
// has no price could never be reached). It does not price usage itself
// (model.Price.Cost does) and knows no provider.
package prices

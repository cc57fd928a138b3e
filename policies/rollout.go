package policies

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Bounds and defaults of rollouts.
const (
	// DefaultMinRuns is the canary runs a guard waits for before it
	// judges.
	DefaultMinRuns = 20
	// MaxMinRuns bounds a guard's min_runs.
	MaxMinRuns = 1_000_000
	// rolloutBuckets is the resolution of a rollout's percent: 0.01 %.
	rolloutBuckets = 10_000
	// guardZ is the one-sided z score (95 %) above which a canary fails
	// measurably more than its stable version.
	guardZ = 1.645
)

// RolloutSpec is a definition's `rollout:`: the version the file creates
// (the canary) serves Percent of new sessions, the version serving now
// (the stable) the rest. A session is assigned by a stable hash of its
// name, so every worker puts it on the same side, and keeps the version
// it was assigned while the rollout lasts. Applying the file again with
// another percent changes the rollout; applying it without rollout
// promotes the canary to every new session.
type RolloutSpec struct {
	// Version, when set, must be the version the apply makes the canary
	// (the one it creates, or the newest when the content is unchanged),
	// so a file never canaries something other than what was reviewed.
	Version uint64 `yaml:"version,omitempty" json:"version,omitempty"`
	// Percent of new sessions that get the canary: more than 0 and less
	// than 100, in steps of 0.01.
	Percent float64 `yaml:"percent" json:"percent"`
	// Guard ends the rollout by itself when the canary fails.
	Guard *Guard `yaml:"guard,omitempty" json:"guard,omitempty"`
}

// Guard ends a rollout by itself, restoring the stable version, when the
// canary's runs fail measurably more than the stable version's over the
// same period. A run fails when it ends failed or budget_exceeded, or when
// one of its tool calls returned an error.
type Guard struct {
	// MaxFailureRate is the canary failure rate (0 to 1) the guard
	// tolerates: it rolls back only above it.
	MaxFailureRate float64 `yaml:"max_failure_rate,omitempty" json:"max_failure_rate"`
	// MinRuns is how many canary runs the guard waits for before it
	// judges; default 20.
	MinRuns int `yaml:"min_runs,omitempty" json:"min_runs,omitempty"`
	// CompareToStable (default true) also requires the canary's failure
	// rate to be measurably above the stable version's over the same
	// period (a one-sided two-proportion test at 95 %), so a canary is
	// not blamed for what fails for every version. False judges the
	// canary by MaxFailureRate alone.
	CompareToStable *bool `yaml:"compare_to_stable,omitempty" json:"compare_to_stable,omitempty"`
}

// minRuns is MinRuns with its default.
func (g Guard) minRuns() int64 {
	if g.MinRuns <= 0 {
		return DefaultMinRuns
	}
	return int64(g.MinRuns)
}

// compares is CompareToStable with its default.
func (g Guard) compares() bool { return g.CompareToStable == nil || *g.CompareToStable }

// String renders the guard as a definition writes it.
func (g Guard) String() string {
	return fmt.Sprintf("max_failure_rate %g, min_runs %d, compare_to_stable %t", g.MaxFailureRate, g.minRuns(), g.compares())
}

// Judge reports whether the canary's runs, against the stable version's
// over the same period, end the rollout, and why (with the figures) when
// they do.
func (g Guard) Judge(canary, stable RunCounts) (bool, string) {
	if canary.Runs < g.minRuns() {
		return false, ""
	}
	rc := canary.Rate()
	if rc <= g.MaxFailureRate {
		return false, ""
	}
	why := fmt.Sprintf("canary version %d failed %d of %d runs (%.1f%%), above max_failure_rate %.1f%%",
		canary.Version, canary.Failed, canary.Runs, 100*rc, 100*g.MaxFailureRate)
	if !g.compares() {
		return true, why
	}
	if stable.Runs == 0 {
		return true, why + fmt.Sprintf("; stable version %d had no runs to compare with", stable.Version)
	}
	rs := stable.Rate()
	p := float64(canary.Failed+stable.Failed) / float64(canary.Runs+stable.Runs)
	se := math.Sqrt(p * (1 - p) * (1/float64(canary.Runs) + 1/float64(stable.Runs)))
	if se == 0 || (rc-rs)/se < guardZ {
		return false, ""
	}
	return true, why + fmt.Sprintf(", and measurably above stable version %d's %d of %d (%.1f%%)",
		stable.Version, stable.Failed, stable.Runs, 100*rs)
}

// RunCounts are the finished runs of one version during a rollout.
type RunCounts struct {
	Version uint64 `json:"version"`
	Runs    int64  `json:"runs"`
	Failed  int64  `json:"failed"`
}

// Rate is the share of failed runs, 0 without runs.
func (c RunCounts) Rate() float64 {
	if c.Runs == 0 {
		return 0
	}
	return float64(c.Failed) / float64(c.Runs)
}

// Rollout is an agent's rollout in force: the canary version serves
// Percent of new sessions, the stable version the rest. The store keeps
// it with the agent's newest version in jl_agents.
type Rollout struct {
	// ID names this rollout: a session assigned to the canary records it,
	// and the guard's counters belong to it.
	ID string `json:"id"`
	// Stable and Canary are version numbers, with the jl_agents revisions
	// that hold them.
	Stable         uint64  `json:"stable"`
	StableRevision uint64  `json:"stable_revision"`
	Canary         uint64  `json:"canary"`
	CanaryRevision uint64  `json:"canary_revision"`
	Percent        float64 `json:"percent"`
	Guard          *Guard  `json:"guard,omitempty"`
	// Started is when the rollout began, and StartedBy who began it;
	// Changed is its last change.
	Started   time.Time `json:"started"`
	StartedBy string    `json:"started_by,omitempty"`
	Changed   time.Time `json:"changed"`
}

// String renders the rollout for people: "canary v5 at 10% beside stable v4".
func (r Rollout) String() string {
	return fmt.Sprintf("canary v%d at %g%% beside stable v%d", r.Canary, r.Percent, r.Stable)
}

// AssignsCanary reports whether the rollout puts a new session on the
// canary: the session's place among 10,000 buckets, a hash of the agent,
// the session and the rollout, is below Percent. Every process agrees, a
// session always gets the same answer, and raising the percent keeps the
// sessions already on the canary there.
func (r Rollout) AssignsCanary(agent, session string) bool {
	return RolloutBucket(agent, session, r.ID) < uint64(math.Round(r.Percent*rolloutBuckets/100))
}

// RolloutBucket is a session's bucket, 0 to 9,999, in the rollout id.
func RolloutBucket(agent, session, id string) uint64 {
	h := sha256.New()
	for _, s := range []string{agent, session, id} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return binary.BigEndian.Uint64(h.Sum(nil)[:8]) % rolloutBuckets
}

// Outcomes of a rollout that ended.
const (
	// RolloutPromoted: the canary serves every new session.
	RolloutPromoted = "promoted"
	// RolloutRolledBack: the stable version serves every new session
	// again, by hand or by the guard; sessions on the canary return to it
	// at their next run.
	RolloutRolledBack = "rolled_back"
	// RolloutSuperseded: a newer apply replaced the canary.
	RolloutSuperseded = "superseded"
)

// RolloutEnd records how a rollout ended, in the entry that ended it.
type RolloutEnd struct {
	ID      string `json:"id"`
	Canary  uint64 `json:"canary"`
	Stable  uint64 `json:"stable"`
	Outcome string `json:"outcome"`
	// Reason says why: the guard's finding with its figures, or who ended
	// it by hand.
	Reason string `json:"reason,omitempty"`
	// Canary and stable runs counted while the rollout lasted, when the
	// guard ended it.
	CanaryRuns *RunCounts `json:"canary_runs,omitempty"`
	StableRuns *RunCounts `json:"stable_runs,omitempty"`
	By         string     `json:"by,omitempty"`
	At         time.Time  `json:"at"`
}

// checkRollout validates a definition's rollout.
func checkRollout(c *checker, r *RolloutSpec) {
	if r == nil {
		return
	}
	switch {
	case math.IsNaN(r.Percent) || r.Percent <= 0:
		c.addf("rollout.percent", "%v: want more than 0 and less than 100 (to serve every new session, apply without rollout)", r.Percent)
	case r.Percent >= 100:
		c.addf("rollout.percent", "%v: a rollout serves less than 100%% of new sessions; apply without rollout to serve every one", r.Percent)
	case math.Round(r.Percent*100) == 0:
		c.addf("rollout.percent", "%v: the smallest share is 0.01", r.Percent)
	}
	if g := r.Guard; g != nil {
		if err := g.validate(); err != nil {
			c.add("rollout.guard"+err.field, err.err)
		}
	}
}

type fieldErr struct {
	field string
	err   error
}

// validate reports a guard that cannot work, naming the field.
func (g Guard) validate() *fieldErr {
	switch {
	case math.IsNaN(g.MaxFailureRate) || g.MaxFailureRate < 0 || g.MaxFailureRate >= 1:
		return &fieldErr{".max_failure_rate", fmt.Errorf("%v: want a rate from 0 to less than 1 (0.2 is 20%%)", g.MaxFailureRate)}
	case g.MinRuns < 0 || g.MinRuns > MaxMinRuns:
		return &fieldErr{".min_runs", fmt.Errorf("%d: want 1 to %d (default %d)", g.MinRuns, MaxMinRuns, DefaultMinRuns)}
	}
	return nil
}

// ValidateGuard reports a guard that cannot work, for guards that come
// from elsewhere than a file (the rollout verb).
func ValidateGuard(g Guard) error {
	if err := g.validate(); err != nil {
		return fmt.Errorf("%w: guard%s: %w", ErrInvalid, err.field, err.err)
	}
	return nil
}

package record

// Action is what recovery does with a step whose intent is stored and
// whose settlement is not.
type Action string

// Recovery actions (DESIGN §8).
const (
	// Adopt: the step's settlement is stored whole under its reserved
	// ids; write the state forward as the settlement would have.
	Adopt Action = "adopt"
	// Remake: make the model call again; the interrupted one is counted
	// as possibly billed, its usage unknown.
	Remake Action = "remake"
	// Rerun: execute the tool call again.
	Rerun Action = "rerun"
	// Probe: ask the tool whether the interrupted call's effect happened:
	// found, settle with what it found; not found, execute it once.
	Probe Action = "probe"
	// Synthetic: settle the synthetic error result "interrupted; may or
	// may not have run" under the reserved id.
	Synthetic Action = "synthetic"
)

// Pending is what recovery knows of an interrupted step.
type Pending struct {
	Kind StepKind
	// Stored is the declaration the intent stored; Current the tool's
	// declaration now ("" when the definition no longer lets the session
	// call it, or no such tool is registered).
	Stored, Current Replay
	// Found reports that the step's settlement is stored whole under its
	// reserved ids (Store.Stored).
	Found bool
}

// recoveryRow is one row of DESIGN §8's recovery table.
type recoveryRow struct {
	row    string
	match  func(Pending) bool
	action Action
}

// recoveryTable is DESIGN §8's table, row for row, first match wins.
var recoveryTable = []recoveryRow{
	{"any step whose reserved result entry already exists", func(p Pending) bool { return p.Found }, Adopt},
	{"model call", func(p Pending) bool { return p.Kind == StepModel }, Remake},
	{"tool, stored and current declaration both replay-safe", func(p Pending) bool {
		return p.Kind == StepTool && p.Stored == ReplaySafe && p.Current == ReplaySafe
	}, Rerun},
	// An answer's post to its chat thread (StepReply) is a tool step of
	// the runtime's own, with a probe.
	{"tool with a probe (stored and current declaration both probe)", func(p Pending) bool {
		return (p.Kind == StepTool || p.Kind == StepReply) && p.Stored == ReplayProbe && p.Current == ReplayProbe
	}, Probe},
	{"any other tool", func(Pending) bool { return true }, Synthetic},
}

// Recovery returns what recovery does with an interrupted step: DESIGN
// §8's table. It decides nothing else: the engine still bounds the
// attempts of Remake and Rerun and checks budgets before it makes an
// effect again, except for a delegate call whose event is stored
// (Store.Delegation): publishing it again is no new spending.
func Recovery(p Pending) Action {
	for _, r := range recoveryTable {
		if r.match(p) {
			return r.action
		}
	}
	return Synthetic
}

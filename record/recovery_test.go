package record

import "testing"

// TestRecovery checks the recovery table row for row against DESIGN §8.
func TestRecovery(t *testing.T) {
	tests := []struct {
		row  string
		p    Pending
		want Action
	}{
		{"stored model answer", Pending{Kind: StepModel, Found: true}, Adopt},
		{"stored result of an unsafe tool", Pending{Kind: StepTool, Stored: ReplayUnsafe, Current: ReplayUnsafe, Found: true}, Adopt},
		{"stored result of a tool no longer allowed", Pending{Kind: StepTool, Stored: ReplaySafe, Found: true}, Adopt},
		{"model call", Pending{Kind: StepModel}, Remake},
		{"safe in both declarations", Pending{Kind: StepTool, Stored: ReplaySafe, Current: ReplaySafe}, Rerun},
		{"safe when stored, unsafe now", Pending{Kind: StepTool, Stored: ReplaySafe, Current: ReplayUnsafe}, Synthetic},
		{"unsafe when stored, safe now", Pending{Kind: StepTool, Stored: ReplayUnsafe, Current: ReplaySafe}, Synthetic},
		{"safe when stored, tool gone", Pending{Kind: StepTool, Stored: ReplaySafe}, Synthetic},
		{"probe in both declarations", Pending{Kind: StepTool, Stored: ReplayProbe, Current: ReplayProbe}, Probe},
		{"probe when stored, safe now", Pending{Kind: StepTool, Stored: ReplayProbe, Current: ReplaySafe}, Synthetic},
		{"safe when stored, probe now", Pending{Kind: StepTool, Stored: ReplaySafe, Current: ReplayProbe}, Synthetic},
		{"unsafe", Pending{Kind: StepTool, Stored: ReplayUnsafe, Current: ReplayUnsafe}, Synthetic},
		{"answer post with a probe", Pending{Kind: StepReply, Stored: ReplayProbe, Current: ReplayProbe}, Probe},
		{"answer post, poster gone", Pending{Kind: StepReply, Stored: ReplayProbe}, Synthetic},
		{"stored answer post", Pending{Kind: StepReply, Stored: ReplayProbe, Found: true}, Adopt},
	}
	for _, tt := range tests {
		if got := Recovery(tt.p); got != tt.want {
			t.Errorf("%s: %+v: %s, want %s", tt.row, tt.p, got, tt.want)
		}
	}
	// One row of the code per row of DESIGN §8's table.
	if len(recoveryTable) != 5 {
		t.Errorf("%d rows, DESIGN §8 has 5", len(recoveryTable))
	}
}

// TestIntentDeclared reads the declaration of intents stored before the
// three-valued one.
func TestIntentDeclared(t *testing.T) {
	for _, tt := range []struct {
		p    Intent
		want Replay
	}{
		{Intent{ReplaySafe: true}, ReplaySafe},
		{Intent{}, ReplayUnsafe},
		{Intent{Replay: ReplayProbe}, ReplayProbe},
		{Intent{Replay: ReplayUnsafe, ReplaySafe: true}, ReplayUnsafe},
	} {
		if got := tt.p.Declared(); got != tt.want {
			t.Errorf("%+v: %s, want %s", tt.p, got, tt.want)
		}
	}
}

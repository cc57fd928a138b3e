package policies

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestReadsDataSeesEveryExpression holds CompiledTrigger.ReadsData to
// every expression a trigger has: a field of type *Expr it does not
// look at would have admission evaluate it over null data.
func TestReadsDataSeesEveryExpression(t *testing.T) {
	reads, err := compileExpr("event.data.x", stringOverEvent)
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[CompiledTrigger]()
	n := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type != reflect.TypeFor[*Expr]() {
			continue
		}
		n++
		var ct CompiledTrigger
		// Unexported fields too (payload).
		fv := reflect.ValueOf(&ct).Elem().Field(i)
		reflect.NewAt(f.Type, unsafe.Pointer(fv.UnsafeAddr())).Elem().Set(reflect.ValueOf(reads))
		if !ct.ReadsData() {
			t.Errorf("a trigger whose %s reads event.data: ReadsData false", f.Name)
		}
	}
	if n == 0 {
		t.Fatal("CompiledTrigger has no *Expr field")
	}
}

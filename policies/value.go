package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// maxValueDepth bounds the nesting of a value an expression returns.
const maxValueDepth = 32

// errMissing marks an evaluation that selected a field or an index the
// event lacks: a prompt renders it as nothing.
var errMissing = errors.New("no such field")

// nativeOf converts a CEL value into plain Go: nil, bool, int64, uint64,
// float64, string, []byte (bytes), time.Time, time.Duration, []any and
// map[string]any. A map with keys that are not strings is an error.
func nativeOf(v ref.Val) (any, error) { return native(v, 0) }

func native(v ref.Val, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("value nested deeper than %d", maxValueDepth)
	}
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		return float64(x), nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return []byte(x), nil
	case types.Timestamp:
		return x.Time, nil
	case types.Duration:
		return x.Duration, nil
	case *types.Err:
		return nil, x
	}
	switch x := v.(type) {
	case traits.Mapper:
		out := map[string]any{}
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is %s, want string", k, k.Type().TypeName())
			}
			e, err := native(x.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok {
			return nil, fmt.Errorf("list without a size")
		}
		out := make([]any, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			e, err := native(x.Get(i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	// Values that wrap plain Go (an event's map or list) end here only
	// when CEL gave them a type of its own; fall back to their Go value.
	switch g := v.Value().(type) {
	case nil, bool, int64, uint64, float64, string, map[string]any, []any:
		return g, nil
	}
	return nil, fmt.Errorf("value of type %s cannot be rendered", v.Type().TypeName())
}

// textOf renders a value as text for a prompt: a string as it is, null
// as nothing, a scalar as written, a list or map as JSON.
func textOf(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return formatFloat(x), nil
	case []byte:
		return string(x), nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case time.Duration:
		return x.String(), nil
	}
	b, err := jsonOf(v)
	return string(b), err
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonOf is v as compact JSON, without HTML escaping (payloads hold
// code and shell commands, which should read as written). Times and
// durations are strings; NaN and infinities are null.
func jsonOf(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(jsonable(v)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return x.String()
	case []byte:
		return string(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
	}
	return v
}

// isMissing reports whether err is CEL's error for a field, key or index
// the input lacks.
func isMissing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "no such key") || strings.Contains(s, "no such attribute") || strings.Contains(s, "index out of bounds")
}

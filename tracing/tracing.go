package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of every span jetloop starts.
const Name = "github.com/jetloop/jetloop"

// propagator is the propagation format of jetloop's trace context: W3C
// Trace Context (traceparent, tracestate), in HTTP headers and in the
// CloudEvents distributed-tracing extension alike.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Start starts a span named name as a child of the span in ctx, with the
// tracer provider that span came from: under no span, or with tracing
// off, the span records nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Name).Start(ctx, name, opts...)
}

// Tracer is tp's tracer of jetloop's spans; nil tp: the global provider.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Name)
}

// Fail marks span failed with err, which it records.
func Fail(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Config is what Setup needs beside the environment.
type Config struct {
	// Service is the default service.name (OTEL_SERVICE_NAME overrides
	// it); default "jetloop".
	Service string
	// Version is the service.version.
	Version string
	// Getenv reads the environment; default none set. The exporter and
	// the SDK read the OTEL_* variables of the process themselves: pass
	// os.Getenv.
	Getenv func(string) string
	// Log receives the exporter's errors (a collector that cannot be
	// reached); default none.
	Log *slog.Logger
}

// Provider is a process's tracer provider and how to stop it.
type Provider struct {
	trace.TracerProvider
	sdk *sdktrace.TracerProvider
	// Endpoint is where spans are exported; empty when tracing is off.
	Endpoint string
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Shutdown exports the spans still buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shut down the exporter: %w", err)
	}
	return nil
}

// Setup builds the process's tracer provider from the standard OTEL_*
// variables and makes it, with the W3C trace-context propagator, otel's
// globals:
//
//   - off (a provider that records nothing) unless
//     OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set, or OTEL_TRACES_EXPORTER is otlp (then the exporter's
//     default, https://localhost:4318); off as well when
//     OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none;
//   - OTLP over HTTP, with protobuf (http/protobuf, the default) or JSON
//     (http/json) bodies: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc and
//     any OTEL_TRACES_EXPORTER but otlp and none are refused, naming the
//     variable;
//   - the exporter's other variables (headers, timeout, compression,
//     certificates), the batch processor's (OTEL_BSP_*), the sampler's
//     (OTEL_TRACES_SAMPLER[_ARG]) and the resource's (OTEL_SERVICE_NAME,
//     OTEL_RESOURCE_ATTRIBUTES) are the SDK's, as it documents them.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if cfg.Service == "" {
		cfg.Service = "jetloop"
	}
	otel.SetTextMapPropagator(propagator)
	if cfg.Log != nil {
		log := cfg.Log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	}
	off := &Provider{TracerProvider: noop.NewTracerProvider()}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return off, nil
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp":
	case "none":
		return off, nil
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s: jetloop exports traces with otlp (OTLP over HTTP) or none", exporter)
	}
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if endpoint == "" {
		if base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); base != "" {
			endpoint = strings.TrimRight(base, "/") + "/v1/traces"
		}
	}
	if endpoint == "" && exporter == "" {
		return off, nil
	}
	if endpoint == "" {
		endpoint = "https://localhost:4318/v1/traces"
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := strings.TrimSpace(getenv(name)); p {
		case "", "http/protobuf", "http/json":
		default:
			return nil, fmt.Errorf("tracing: %s=%s: jetloop exports OTLP over HTTP: http/protobuf (the default) or http/json", name, p)
		}
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter to %s: %w", endpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(sdk)
	return &Provider{TracerProvider: sdk, sdk: sdk, Endpoint: endpoint}, nil
}

// Attribute names of jetloop's spans beside the semantic conventions'.
const (
	AttrAgent   = attribute.Key("jetloop.agent")
	AttrSession = attribute.Key("jetloop.session")
	AttrTurn    = attribute.Key("jetloop.turn")
	AttrStep    = attribute.Key("jetloop.step")
	AttrStatus  = attribute.Key("jetloop.status")
	AttrVersion = attribute.Key("jetloop.definition_version")
	AttrSeq     = attribute.Key("jetloop.seq")
	AttrCostUSD = attribute.Key("jetloop.cost_usd")
	AttrVerb    = attribute.Key("jetloop.control.verb")
	AttrReplay  = attribute.Key("jetloop.tool.replay")
	// AttrEventID and AttrEventType are the CloudEvent's id and type
	// (the CloudEvents semantic conventions).
	AttrEventID   = attribute.Key("cloudevents.event_id")
	AttrEventType = attribute.Key("cloudevents.event_type")
)

// Attribute names of the GenAI semantic conventions, on the spans of
// model calls ("chat <model>") and tool calls ("execute_tool <tool>").
// Both gen_ai.provider.name and its predecessor gen_ai.system are set,
// so backends of either generation recognise a call.
const (
	GenAIOperation    = attribute.Key("gen_ai.operation.name")
	GenAIProvider     = attribute.Key("gen_ai.provider.name")
	GenAISystem       = attribute.Key("gen_ai.system")
	GenAIRequestModel = attribute.Key("gen_ai.request.model")
	GenAIRespModel    = attribute.Key("gen_ai.response.model")
	GenAIInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	GenAIFinish       = attribute.Key("gen_ai.response.finish_reasons")
	GenAIToolName     = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID   = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType     = attribute.Key("gen_ai.tool.type")
)

// Operation names of the GenAI semantic conventions.
const (
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// Session is the attributes naming a session.
func Session(agent, session string) []attribute.KeyValue {
	return []attribute.KeyValue{AttrAgent.String(agent), AttrSession.String(session)}
}

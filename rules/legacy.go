package rules

import (
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"
)

// Documents of earlier releases wrote a flow rule's strategy and behavior
// as flat fields; Decode maps them onto the sections (docs/releasing.md),
// refusing a rule that also writes the section. Encode writes sections.
type flowFlat struct {
	Strategy     string        `yaml:"strategy"` // warm-up: warmUp; token-bucket: bucket
	Behavior     string        `yaml:"behavior"` // throttle: throttle
	MaxQueueing  time.Duration `yaml:"maxQueueing"`
	WarmUpPeriod time.Duration `yaml:"warmUpPeriod"`
	ColdFactor   float64       `yaml:"coldFactor"`
	Burst        float64       `yaml:"burst"`
}

// paramFlat holds the flat fields of a param rule of earlier releases.
type paramFlat struct {
	Behavior    string        `yaml:"behavior"`
	MaxQueueing time.Duration `yaml:"maxQueueing"`
}

// flatTypes maps each rule type that had flat fields to their type.
var flatTypes = map[reflect.Type]reflect.Type{
	reflect.TypeFor[Flow](): reflect.TypeFor[flowFlat](), reflect.TypeFor[Param](): reflect.TypeFor[paramFlat](),
}

// rule decodes rule n into v, a rule type of flatTypes, reading the flat
// fields beside v's own (d.field) and mapping them onto v's sections.
func (d *decoder) rule(n *yaml.Node, v reflect.Value) *decodeErr {
	d.flat = reflect.New(flatTypes[v.Type()]).Elem()
	if err := d.fields(n, v); err != nil {
		return err
	}
	c := &check{}
	switch r, fl := v.Addr().Interface(), d.flat.Addr().Interface(); r := r.(type) {
	case *Flow:
		fl.(*flowFlat).apply(c, r)
	case *Param:
		r.Throttle = throttleOf(c, fl.(*paramFlat).Behavior, fl.(*paramFlat).MaxQueueing, r.Throttle)
	}
	if e, ok := c.err.(*Error); ok {
		return (&decodeErr{msg: e.Reason, line: n.Line}).in(e.Field)
	}
	return nil
}

// field returns field f of struct v as docFields numbers them: v's, then
// the flat fields of the rule being decoded.
func (d *decoder) field(v reflect.Value, f int) reflect.Value {
	if f < v.NumField() {
		return v.Field(f)
	}
	return d.flat.Field(f - v.NumField())
}

// apply maps fl onto the warmUp, bucket and throttle sections of r.
func (fl *flowFlat) apply(c *check, r *Flow) {
	warm, bucket := fl.Strategy == "warm-up", fl.Strategy == "token-bucket"
	enum(c, "Strategy", fl.Strategy, true, "direct", "warm-up", "token-bucket")
	c.fail(fl.Strategy != "" && (r.WarmUp != nil || r.Bucket != nil), "Strategy",
		"is the flat field of earlier releases; beside a warmUp or bucket section, leave it out")
	c.fail(!warm && fl.WarmUpPeriod != 0, "WarmUpPeriod", "is only used with strategy warm-up; write warmUp: {period: %v}",
		fl.WarmUpPeriod)
	c.fail(!warm && fl.ColdFactor != 0, "ColdFactor", "is only used with strategy warm-up; write it in the warmUp section")
	c.fail(!bucket && fl.Burst != 0, "Burst",
		"is only used with strategy token-bucket; write bucket: {burst: %v}", fl.Burst)
	if warm {
		r.WarmUp = &WarmUp{Period: fl.WarmUpPeriod, ColdFactor: fl.ColdFactor}
	} else if bucket {
		r.Bucket = &Bucket{Burst: fl.Burst}
	}
	r.Throttle = throttleOf(c, fl.Behavior, fl.MaxQueueing, r.Throttle)
}

// throttleOf returns the throttle section of a rule writing behavior,
// maxQueueing q and section t.
func throttleOf(c *check, behavior string, q time.Duration, t *Throttle) *Throttle {
	enum(c, "Behavior", behavior, true, "reject", "throttle")
	c.fail(behavior != "" && t != nil, "Behavior",
		"is the flat field of earlier releases; beside a throttle section, leave it out")
	c.fail(q != 0 && behavior != "throttle", "MaxQueueing",
		"is only used with behavior throttle; write throttle: {maxQueueing: %v}", q)
	if behavior == "throttle" {
		return &Throttle{MaxQueueing: q}
	}
	return t
}

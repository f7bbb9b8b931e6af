package core

import "fmt"

// TrafficType says whether an entry is a call into this process (Inbound) or
// a call this process makes to something else (Outbound). System adaptive
// protection checks only Inbound traffic.
type TrafficType uint8

const (
	// Inbound is traffic arriving at this process: an HTTP request served, a
	// gRPC method handled. It is the default traffic type of an entry.
	Inbound TrafficType = iota
	// Outbound is traffic this process sends: a call to a database or another
	// service. System rules never block it.
	Outbound
)

// BlockType names the kind of rule that refused an entry.
type BlockType uint8

const (
	// BlockFlow is a flow (QPS or concurrency) rule.
	BlockFlow BlockType = iota + 1
	// BlockSystem is a system adaptive protection rule.
	BlockSystem
	// BlockParam is a hot-parameter rule.
	BlockParam
	// BlockDegrade is an open or probing circuit breaker.
	BlockDegrade
	// BlockCluster is a limit shared across instances.
	BlockCluster
	// BlockCustom is a user-registered rule-check slot.
	BlockCustom
	// BlockAuthority is an authority rule: the caller is not allowed.
	BlockAuthority
)

// String returns the lower-case name of the block type ("flow", "system", ...).
func (b BlockType) String() string {
	switch b {
	case BlockFlow:
		return "flow"
	case BlockSystem:
		return "system"
	case BlockParam:
		return "param"
	case BlockDegrade:
		return "degrade"
	case BlockCluster:
		return "cluster"
	case BlockCustom:
		return "custom"
	case BlockAuthority:
		return "authority"
	}
	return fmt.Sprintf("BlockType(%d)", uint8(b))
}

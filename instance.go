package sluice

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
)

// InstanceID returns the instance's identity in its heartbeats
// (ClusterConfig.InstanceID, else the host name, the process ID and a
// random suffix). Package fleet names the instance so in its rule reports
// and telemetry unless told another name.
func (eng *Engine) InstanceID() string { return eng.id }

// instanceID returns the instance's identity (id if set) and host name.
func instanceID(id string) (string, string) {
	host, _ := os.Hostname()
	if id == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id = host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	}
	return id, host
}

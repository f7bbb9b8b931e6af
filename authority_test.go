package sluice

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// TestAuthoritySentinelCases are the cases of Alibaba Sentinel's
// AuthorityRuleCheckerTest.testPassCheck and AuthoritySlotTest
// (sentinel-core, slots/block/authority), in this project's terms: a
// caller on an allow list passes and one off it is refused; a caller on a
// deny list is refused and one off it passes; an entry without a caller
// passes any non-strict rule (Sentinel's checker lets an empty origin
// through); the strict cases are this project's.
func TestAuthoritySentinelCases(t *testing.T) {
	tests := []struct {
		source string
		rule   rules.Authority
		caller string
		pass   bool
		reason string
	}{
		{"AuthorityRuleCheckerTest ruleA: white list appA,appB", rules.Authority{Allow: []string{"appA", "appB"}}, "appA", true, ""},
		{"AuthorityRuleCheckerTest ruleB: white list appB", rules.Authority{Allow: []string{"appB"}}, "appA", false, reasonNotAllowed},
		{"AuthorityRuleCheckerTest ruleC: black list appA", rules.Authority{Deny: []string{"appA"}}, "appA", false, reasonDenied},
		{"AuthorityRuleCheckerTest ruleD: black list appC", rules.Authority{Deny: []string{"appC"}}, "appA", true, ""},
		{"AuthoritySlotTest NoExceptionItemsSuccess: black list appD", rules.Authority{Deny: []string{"appD"}}, "appA", true, ""},
		{"AuthoritySlotTest NoExceptionItemsBlackFail: black list appA,appC", rules.Authority{Deny: []string{"appA", "appC"}}, "appA", false, reasonDenied},
		{"AuthoritySlotTest NoExceptionItemsWhiteFail: white list appB,appE", rules.Authority{Allow: []string{"appB", "appE"}}, "appA", false, reasonNotAllowed},
		{"AuthorityRuleChecker: a name within a listed one is not listed", rules.Authority{Allow: []string{"appAB"}}, "appA", false, reasonNotAllowed},
		{"AuthorityRuleChecker: empty origin passes a white list", rules.Authority{Allow: []string{"appA"}}, "", true, ""},
		{"AuthorityRuleChecker: empty origin passes a black list", rules.Authority{Deny: []string{"appA"}}, "", true, ""},
		{"strict allow list: no caller refused", rules.Authority{Allow: []string{"appA"}, Strict: true}, "", false, reasonNoCaller},
		{"strict allow list: listed caller passes", rules.Authority{Allow: []string{"appA"}, Strict: true}, "appA", true, ""},
		{"strict alone: any caller passes", rules.Authority{Strict: true}, "anyone", true, ""},
		{"strict alone: no caller refused", rules.Authority{Strict: true}, "", false, reasonNoCaller},
		{"strict deny list: denied caller refused", rules.Authority{Deny: []string{"x"}, Strict: true}, "x", false, reasonDenied},
		{"callers compare byte for byte", rules.Authority{Allow: []string{"appA"}}, "appa", false, reasonNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.source, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			r := tc.rule
			r.Resource, r.ID = "res", "auth"
			require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{r}}))
			p, err := g.Entry("res", WithCaller(tc.caller))
			s, _ := g.Snapshot("res")
			if tc.pass {
				require.NoError(t, err)
				p.Exit()
				assert.Zero(t, s.TotalBlock)
				return
			}
			var be *core.BlockError
			require.True(t, errors.As(err, &be), "%v", err)
			assert.Equal(t, core.BlockAuthority, be.Type)
			assert.Equal(t, "authority", be.Type.String())
			assert.Equal(t, "res", be.Resource)
			assert.Equal(t, "auth", be.Rule.ID)
			assert.Equal(t, tc.reason, be.Reason)
			assert.False(t, be.Overloaded(), "a refused caller is not overload")
			assert.Equal(t, uint64(1), s.BlockedBy[core.BlockAuthority])
			assert.Equal(t, uint64(1), s.TotalBlock)
		})
	}
}

// TestAuthorityBeforeFlow: a refused caller takes nothing of a flow limit
// (the authority check comes first), and the flow rule's count holds
// exactly for the callers let in, across reloads of the authority rule
// (which keep the flow rule's counters).
func TestAuthorityBeforeFlow(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	set := rules.Set{
		Flow:      []rules.Flow{{Resource: "pay", Threshold: 3}},
		Authority: []rules.Authority{{Resource: "pay", Allow: []string{"checkout"}, Strict: true}},
	}
	require.NoError(t, g.LoadRules(set))
	for i := 0; i < 10; i++ {
		_, err := g.Entry("pay", WithCaller("mallory"))
		require.True(t, blockedBy(err, core.BlockAuthority))
		_, err = g.Entry("pay")
		require.True(t, blockedBy(err, core.BlockAuthority))
	}
	admit := func(caller string) bool {
		p, err := g.Entry("pay", WithCaller(caller))
		p.Exit()
		return err == nil
	}
	require.True(t, admit("checkout"))
	require.True(t, admit("checkout"))
	// Reload: billing is allowed now; the flow rule keeps its count (2).
	set.Authority[0].Allow = []string{"checkout", "billing"}
	require.NoError(t, g.LoadRules(set))
	require.True(t, admit("billing"))
	require.False(t, admit("billing"), "the flow rule's 3 per second are used")
	_, err := g.Entry("pay", WithCaller("mallory"))
	require.True(t, blockedBy(err, core.BlockAuthority), "still refused by authority, not flow")
	s, _ := g.Snapshot("pay")
	assert.Equal(t, uint64(21), s.BlockedBy[core.BlockAuthority])
	assert.Equal(t, uint64(1), s.BlockedBy[core.BlockFlow])
	clk.Advance(1e9)
	require.True(t, admit("billing"))
	// Removing the rule lets everyone in again.
	set.Authority = nil
	require.NoError(t, g.LoadRules(set))
	require.True(t, admit("mallory"))
	require.True(t, admit(""))
	require.Nil(t, g.Rules().Authority)
}

// TestAuthorityShadow: a shadow authority rule counts what it would refuse
// and refuses nothing.
func TestAuthorityShadow(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "r", Deny: []string{"x"}, Shadow: true}}}))
	p, err := g.Entry("r", WithCaller("x"))
	require.NoError(t, err)
	p.Exit()
	s, _ := g.Snapshot("r")
	assert.Equal(t, uint64(1), s.ShadowBlockedBy[core.BlockAuthority])
	assert.Zero(t, s.TotalBlock)
}

// TestAuthorityRefusedLoadKeepsRules: an invalid authority rule is refused
// naming rule and field, and the rules in force stay.
func TestAuthorityRefusedLoadKeepsRules(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	good := rules.Set{Authority: []rules.Authority{{Resource: "r", Deny: []string{"x"}}}}
	require.NoError(t, g.LoadRules(good))
	err := g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "r", Deny: []string{"x"}}, {Resource: "s", Allow: []string{"bad\ncaller"}}}})
	var re *rules.Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, "authority", re.Kind)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Allow", re.Field)
	assert.Equal(t, good, g.Rules())
	_, err = g.Entry("r", WithCaller("x"))
	require.True(t, blockedBy(err, core.BlockAuthority))
}

func blockedBy(err error, typ core.BlockType) bool {
	var be *core.BlockError
	return errors.As(err, &be) && be.Type == typ
}

// TestBlockLogNamesCaller: the block log writes a record per refused
// caller, naming it (message and attribute); entries without a caller keep
// the record without one.
func TestBlockLogNamesCaller(t *testing.T) {
	h := &captureHandler{}
	g, clk := newTestEngine(t, 0, WithBlockLog(slog.New(h)))
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{ID: "pay", Resource: "POST /pay", Allow: []string{"checkout"}}}}))
	for range 3 {
		_, err := g.Entry("POST /pay", WithCaller("mallory"))
		require.Error(t, err)
	}
	_, err := g.Entry("POST /pay", WithCaller("eve\u202e"))
	require.Error(t, err)
	clk.Advance(time.Second)
	g.Each(func(string, stat.Snapshot) {}) // writes the second's records
	recs := h.take()
	require.Len(t, recs, 2)
	got := map[string]string{}
	for _, r := range recs {
		a := attrs(r)
		got[a["caller"]] = r.Message
		assert.Equal(t, "authority", a["type"])
		assert.Equal(t, "pay", a["rule"])
	}
	assert.Equal(t, `POST /pay refused 3 from "mallory" by authority rule "pay" (threshold 0) at `, got["mallory"][:len(got["mallory"])-8])
	assert.Contains(t, got["eve\u202e"], `from "eve\u202e"`, "the message quotes the caller, escaping what a terminal would obey")
}

// TestAuthorityEvents: loading authority rules publishes an
// EventRulesLoaded of kind "authority"; an invalid one an
// EventRulesRefused naming the rule.
func TestAuthorityEvents(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	var kinds []string
	var refused []error
	cancel := g.Subscribe(func(e stat.Event) {
		switch e.Kind {
		case stat.EventRulesLoaded:
			kinds = append(kinds, e.RuleKind)
		case stat.EventRulesRefused:
			refused = append(refused, e.Err)
		}
	})
	defer cancel()
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "r", Strict: true}}}))
	require.Error(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "r"}}}))
	assert.Equal(t, []string{"authority"}, kinds)
	require.Len(t, refused, 1)
	assert.Contains(t, refused[0].Error(), `authority rule 0 (resource "r")`)
}

package sluice

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/slots"
)

// sharedRefuser is a custom slot that refuses every entry with one error
// it shares between refusals.
type sharedRefuser struct{ err *core.BlockError }

func (r sharedRefuser) Check(*slots.Entry) *core.BlockError { return r.err }

// TestCustomSlotSharedRefusal: a custom slot may share one error between
// its refusals. The engine fills in a missing type and resource in a copy
// and never writes to the slot's error (it did, a data race between
// concurrent refusals under -race); an error with both set is returned as
// it is.
func TestCustomSlotSharedRefusal(t *testing.T) {
	t.Run("type and resource missing", func(t *testing.T) {
		g := New()
		t.Cleanup(func() { _ = g.Close() })
		shared := &core.BlockError{Reason: "full"}
		require.NoError(t, g.RegisterSlot(sharedRefuser{shared}, 0))
		const goroutines, each = 8, 100
		var wg sync.WaitGroup
		errs := make([][]error, goroutines)
		for i := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					_, err := g.Entry("r")
					errs[i] = append(errs[i], err)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, core.BlockError{Reason: "full"}, *shared, "the slot's error is unchanged")
		for _, es := range errs {
			for _, err := range es {
				var be *BlockError
				require.True(t, errors.As(err, &be), "%v", err)
				assert.NotSame(t, shared, be)
				assert.Equal(t, BlockCustom, be.Type)
				assert.Equal(t, "r", be.Resource)
				assert.Equal(t, "full", be.Reason)
			}
		}
	})
	t.Run("complete", func(t *testing.T) {
		g := New()
		t.Cleanup(func() { _ = g.Close() })
		shared := &core.BlockError{Type: BlockCustom, Resource: "r", Reason: "full"}
		require.NoError(t, g.RegisterSlot(sharedRefuser{shared}, 0))
		_, err := g.Entry("r")
		var be *BlockError
		require.True(t, errors.As(err, &be), "%v", err)
		assert.Same(t, shared, be)
	})
}

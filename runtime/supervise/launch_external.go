package supervise

import (
	"context"
)

// ExternalLauncher starts nothing: it says how to start the workers that
// join a generation from elsewhere ('graphpipe worker --nats URL --run ID').
type ExternalLauncher struct {
	// Announce, when set, tells the user how to start gen's workers (the
	// command line, with how to pass the token): one per slot, each
	// joining generation gen.Gen of run gen.Run.
	Announce func(gen *Generation)
}

func (e *ExternalLauncher) Start(_ context.Context, gen *Generation) error {
	if e.Announce != nil {
		e.Announce(gen)
	}
	return nil
}

func (e *ExternalLauncher) Stop(*Generation, bool) {}
func (e *ExternalLauncher) Close() error           { return nil }

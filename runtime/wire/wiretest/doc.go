// Package wiretest holds what tests of transports share: the contract
// suite every wire.Transport runs (TestTransport), modelled on gonum's
// testgraph, and the helpers of tests over a real NATS cluster (DialCluster,
// NodeOf).
//
// An implementation's test, in order:
//
//  1. calls TestTransport(t, mk) with an mk that makes a fresh transport for
//     each subtest (a new in-memory transport, or a new connection to a
//     server started once), and closes what mk opened besides the
//     transport with t.Cleanup;
//  2. says through Lossy whether its transport loses, duplicates, reorders
//     or delays messages (the in-memory transport with faults): the suite
//     then publishes again until a message is heard, and forgives
//     duplicates, as the links above a transport do; a reliable transport
//     must deliver each message once;
//  3. adds its own tests for what the contract leaves to it (reconnection,
//     authentication, the faults' statistics).
//
// The contract, what TestTransport holds every transport to:
//
//  1. Delivery: a message published on a subject reaches every subscriber
//     of that subject, with the bytes published; the publisher may reuse
//     its buffer once Publish returns.
//  2. Isolation: a subscriber hears nothing of other subjects.
//  3. One at a time: a subscription's function is never called twice at
//     once.
//  4. Unsubscribe: nothing published after unsubscribe returns reaches that
//     subscription; the others on the subject go on hearing.
//  5. Payload limit: MaxPayload is positive and a message of MaxPayload
//     bytes is delivered whole; a larger one is refused with an error,
//     never delivered cut.
//  6. Close: after Close, Publish and Subscribe fail, nothing more is
//     delivered, and a second Close does no harm.
package wiretest

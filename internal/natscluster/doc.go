// Package natscluster runs a real NATS cluster for tests: Debian's
// nats-server binary (the nats-server package), a few nodes on loopback
// ports with routes between every pair, not the copy of the server that
// graphpipe embeds.
//
// A test's duties, in order:
//
//  1. Start(t, Options) writes each node's configuration into a temporary
//     directory, starts the nodes and returns once every node has routes to
//     all the others. It skips the test when no nats-server binary is
//     installed, or fails it when $GRAPHPIPE_REQUIRE_NATS_SERVER is set
//     (.ci/run installs the binary and sets it, so CI never skips); it fails it when
//     the nodes do not come up.
//  2. URL(i) and URLs() are the client addresses; Options.Auth is spliced
//     into every node's configuration (an authorization or accounts block).
//  3. Kill(i) ends a node with SIGKILL, as a crashed host would; Restart(i)
//     starts it again on the same ports and waits for its routes; Alive(i)
//     says which nodes run. Clients(i) names the clients connected to a
//     node now, ClientSubs(i) adds what each subscribes to, and Subs(i,
//     prefix) is every subscription under prefix of the node's clients
//     (its monitoring port: /connz and /subsz).
//  4. Nothing else: the cluster is stopped, and its directory removed, when
//     the test ends.
package natscluster

// Package wire moves a run's bytes: transports (NATS through a client, the
// NATS server embedded in this process, and a faulty in-memory transport
// for tests), the frames on them, and reliable endpoints over them. It
// knows nothing of plans, stages or training: a message is bytes under a
// Key, and what a key means is the runtime's business.
//
// The contract:
//
//  1. A Transport publishes byte messages on subjects and calls a
//     subscription's function for each, one at a time. It may lose,
//     duplicate, reorder and delay messages; it refuses one over its
//     MaxPayload; after Close nothing is published or delivered. Every
//     implementation runs one contract suite (wiretest.TestTransport).
//  2. Frames are versioned and msgpack-encoded, the payload as one binary
//     field; each names (run, generation, iteration, micro-batch, edge,
//     direction, chunk). DecodeFrame and DecodeTensors check every length
//     against the bytes left before allocating, so a small frame that
//     declares a huge array is refused, not obeyed. A tensor message
//     (tensors.go) carries each tensor's little-endian data whole, at a
//     multiple of 4 bytes from its start: it is written from the tensors'
//     own memory (TensorPayload, LayoutTensors: no per-element loop, no
//     copy on a little-endian machine) and read in place
//     (DecodeTensorsView) from a message assembled in memory of its own.
//     A message of device tensors (ipc.go) carries, instead of bytes, IPC
//     handles of the sender's device buffers, for a receiver on the same
//     host to copy from; the two are told apart by their first bytes.
//  3. An Endpoint is one party of a run's generation (its Inbox). A message
//     larger than the transport's payload limit is cut into chunks and
//     reassembled: each chunk's frame is made from the payload as it goes
//     out (SendPayload: a Payload read piece by piece, which may still be
//     arriving from a device), into frame buffers reused once acknowledged,
//     or, over a SplitTransport (NATS, with headers), split: its fields in a
//     header and its payload sent from the caller's memory, which
//     SendPayload then holds until those chunks are acknowledged. The
//     receiver copies each chunk into its place in one buffer as it comes;
//     Recycle gives a message's buffer back for a later one of its size.
//     Core NATS is at-most-once, so each link (a sender, a
//     receiver, an edge, a direction) numbers its frames, acknowledges each
//     one and keeps a window of unacknowledged frames, resending after a
//     timeout that follows the measured round trip (RFC 6298) and backs
//     off. A receiver drops duplicates by (generation, iteration,
//     micro-batch, edge, direction, chunk) and acknowledges them again, and
//     drops frames of other generations and of iterations it was told to
//     Forget. Nothing is delivered twice or cut.
//  4. The caller's duties: give each party of a generation its own stage
//     number (the runtime uses stage numbers for workers and -1 for the
//     coordinator, on a separate generation for control traffic), key each
//     message uniquely within a generation, Receive (or ReceiveAny) each
//     message once, Drain before leaving so that nothing sent is lost with
//     the sender, and Close the endpoint, which returns once the
//     acknowledgements of what it received are published.
//  5. Over a NATS cluster (DialNATS with every node's URL) a client whose
//     node dies reconnects to another and restores its subscriptions there;
//     a publish while it reconnects is lost, not an error, and the links
//     (3) resend it; a frame resent after a reconnect is a duplicate like
//     any other. Every subject of a run is under graphpipe.RUN., so a NATS
//     permission on graphpipe.USER.> fences one user's runs (run IDs
//     USER.NAME).
//  6. The embedded server (StartEmbeddedOn) listens on loopback, a random
//     port, with a random token unless told otherwise, and refuses to
//     listen off loopback with neither a token nor TLS.
package wire

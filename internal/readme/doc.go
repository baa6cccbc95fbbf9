// Package readme runs the shell blocks of a Markdown file, the way a new
// user would type them: make readme runs README.md with it, so that the
// page's commands keep working as shown.
//
// The contract:
//
//  1. Parse finds the fenced code blocks. A block whose info string starts
//     with sh, bash or shell is run; any other block is skipped, and said to
//     be. The rest of the info string may hold one annotation:
//     "readme-skip: WHY" skips the block, saying why (it needs a GPU, PyTorch,
//     a NATS cluster), and "readme-repo" runs it in the repository's root
//     instead of the fresh directory. Another word starting with "readme-",
//     or readme-skip without a reason, is an error.
//  2. A block's commands are its lines, a line ending in a backslash joined
//     to the next; blank lines and comment lines are not commands. Here
//     documents are refused: the runner could not tell where they end.
//  3. Run runs every block in order, in one bash, so that what one command
//     sets (export PATH=...) holds for the next; each block starts in the
//     fresh directory (or the repository root), commands read no stdin. It
//     prints each command, how long it took and the head of its output, and
//     stops at the first command that fails, naming its line and showing the
//     tail of its output; past the timeout it stops, naming the command that
//     was running.
package readme

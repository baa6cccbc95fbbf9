// Command runreadme runs the shell blocks of a Markdown file in order, in a
// fresh temporary directory, and fails at the first command that fails (see
// package readme). make readme runs README.md with it:
//
//	go run ./internal/readme/cmd/runreadme [-repo DIR] [-timeout D] README.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/internal/readme"
)

func main() {
	repo := flag.String("repo", ".", "the repository's root, where readme-repo blocks run")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long, naming the command that was running")
	keep := flag.Bool("keep", false, "keep the temporary directory even when every command succeeds")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: runreadme [-repo DIR] [-timeout D] [-keep] FILE.md")
		os.Exit(2)
	}
	os.Exit(run(flag.Arg(0), *repo, *timeout, *keep))
}

func run(file, repo string, timeout time.Duration, keep bool) int {
	md, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "runreadme: %v\n", err)
		return 2
	}
	name := filepath.Base(file)
	blocks, err := readme.Parse(md)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	if repo, err = filepath.Abs(repo); err != nil {
		fmt.Fprintf(os.Stderr, "runreadme: %v\n", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "readme-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "runreadme: %v\n", err)
		return 1
	}
	fmt.Printf("%s: running its shell blocks in %s (readme-repo blocks in %s)\n", name, dir, repo)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	rep, err := readme.Run(ctx, blocks, readme.Options{Name: name, Repo: repo, Dir: dir, Timeout: timeout, Out: os.Stdout})
	skipped := make([]string, len(rep.Skipped))
	for i, b := range rep.Skipped {
		skipped[i] = fmt.Sprintf("line %d (%s)", b.Line, b.Skip)
	}
	fmt.Printf("\n%s: %d commands succeeded in %.0f s; %d blocks skipped: %s\n", name, rep.Commands, time.Since(start).Seconds(), len(skipped), strings.Join(skipped, "; "))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n(the files it made are in %s)\n", err, dir)
		return 1
	}
	if keep {
		fmt.Printf("the files it made are in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	return 0
}

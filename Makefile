# graphpipe: make demo runs the main job, make test runs the tests.
GO        ?= go
BIN       := bin/graphpipe
# Fuzz budgets are execution counts: Go 1.26's coordinator can fail a duration-
# bounded run at its deadline with no crasher (golang/go#75804, fixed in 1.27).
FUZZTIME  ?= 3000000x
DEMO      := out/demo

.PHONY: build test check race demo fuzz loaded bench bench-quick bench-scaling bench-cpu-runs bench-go lint clean replay replay-2bw replay-bf16 replay-torchvision gpu-build readme

# graphpipe version prints the commit (and whether the tree had changes)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED  := $(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true)
LDFLAGS   := -X main.commit=$(COMMIT) -X main.modified=$(if $(MODIFIED),true,false)

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/graphpipe

# The tests a newcomer waits for (a cold build cache on 2 cores: the README
# says how long), all of them built once, as graphpipe ships (CGO_ENABLED=0:
# the CUDA path through purego, on the kernels' emulator). -short leaves the
# long checks to make check: the Slurm and nats-server clusters of the
# tests' own, pools losing agents or nodes, random faults and kills, the
# Makefile's own targets.
test:
	CGO_ENABLED=0 $(GO) test -short ./...
	# a toy op kind added by one row per table (docs/adding-an-op.md), end to end
	CGO_ENABLED=0 $(GO) test -short -tags toyop ./dag ./onnx ./stage/... -run 'Toy|Table|Gradients|Float32Matches|OpsOnEmulator'

# The long checks CI runs after make test: every test -short skips, and a
# few seconds of each fuzz target (the long runs are make fuzz).
check:
	CGO_ENABLED=0 $(GO) test ./...
	$(GO) test ./dag -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 200000x
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodePlan$$' -fuzztime 20000x
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzParseDevice$$' -fuzztime 20000x
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeCluster$$' -fuzztime 20000x
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeOpTimes$$' -fuzztime 20000x
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeSweep$$' -fuzztime 20000x
	$(GO) test ./search -run '^$$' -fuzz '^FuzzSearchDevice$$' -fuzztime 20000x
	$(GO) test ./search -run '^$$' -fuzz '^FuzzOpSeriesAt$$' -fuzztime 20000x
	$(GO) test ./microbatch -run '^$$' -fuzz '^FuzzParseAction$$' -fuzztime 200000x
	$(GO) test ./microbatch -run '^$$' -fuzz '^FuzzParseTrace$$' -fuzztime 20000x
	$(GO) test ./chart -run '^$$' -fuzz '^FuzzInspect$$' -fuzztime 2000x
	$(GO) test ./tensor -run '^$$' -fuzz '^FuzzDecodeSafetensors$$' -fuzztime 100000x
	$(GO) test ./tensor -run '^$$' -fuzz '^FuzzDecodeSafetensorsFrom$$' -fuzztime 50000x
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime 20000x
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeTensors$$' -fuzztime 20000x
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeDeviceTensors$$' -fuzztime 20000x
	$(GO) test ./runtime -run '^$$' -fuzz '^FuzzDecodeManifest$$' -fuzztime 20000x
	$(GO) test ./runtime/supervise -run '^$$' -fuzz '^FuzzExpandHostlist$$' -fuzztime 20000x
	$(GO) test ./onnx -run '^$$' -fuzz '^FuzzImport$$' -fuzztime 20000x
	$(GO) test ./dataset -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 20000x
	$(GO) test ./cmd/graphpipe -run '^$$' -fuzz '^FuzzDecodeRun$$' -fuzztime 20000x

# The main job: profile this CPU (GEMM rate, op call cost, the links between
# worker processes over NATS, the slowdown of workers sharing its cores;
# --quick: a few seconds) and time the ops of a small multi-branch model (the
# MMT preset) on it, plan it on 4 CPU "devices" from those as a graph pipeline
# and as the best sequential pipeline, train each
# for 60 steps with one worker process per device over an embedded NATS
# server, and compare them (graphpipe compare: loss, median iteration time,
# throughput measured and predicted). Then plan the paper's MMT on 32 v100s
# and simulate it. Needs nothing but Go.
demo: build
	@mkdir -p $(DEMO)
	$(BIN) models export mmt --preset small -o $(DEMO)/mmt-small.json
	$(BIN) profile --device cpu --quick -o $(DEMO)/cpu.json > /dev/null
	$(BIN) profile --model $(DEMO)/mmt-small.json -o $(DEMO)/mmt-small.optimes.json
	$(BIN) search $(DEMO)/mmt-small.json --devices 4 --device $(DEMO)/cpu.json --op-times $(DEMO)/mmt-small.optimes.json --micro-batch 4 -o $(DEMO)/small-gpp.json
	$(BIN) search $(DEMO)/mmt-small.json --devices 4 --device $(DEMO)/cpu.json --op-times $(DEMO)/mmt-small.optimes.json --micro-batch 4 --strategy spp -o $(DEMO)/small-spp.json
	$(BIN) explain $(DEMO)/small-gpp.json
	$(BIN) run $(DEMO)/small-gpp.json --model $(DEMO)/mmt-small.json --steps 60 --lr 0.01 --json --trace $(DEMO)/run-gpp-trace.json --timeline $(DEMO)/run-gpp-timeline.png > $(DEMO)/run-gpp.json
	$(BIN) run $(DEMO)/small-spp.json --model $(DEMO)/mmt-small.json --steps 60 --lr 0.01 --json > $(DEMO)/run-spp.json
	$(BIN) compare $(DEMO)/run-spp.json $(DEMO)/run-gpp.json
	$(BIN) models export mmt -o $(DEMO)/mmt.json
	$(BIN) search $(DEMO)/mmt.json --devices 32 --device v100 -o $(DEMO)/mmt-gpp.json
	$(BIN) sim $(DEMO)/small-gpp.json --svg $(DEMO)/small-gpp-timelines.svg --measured $(DEMO)/run-gpp-trace.json > /dev/null
	$(BIN) sim $(DEMO)/mmt-gpp.json --trace $(DEMO)/mmt-gpp-trace.json --svg $(DEMO)/mmt-gpp-timeline.svg > /dev/null
	@echo "demo: plans, runs, traces (open in Perfetto) and timelines under $(DEMO)/: small-gpp-timelines.svg is the small plan simulated above its run"

# The race detector over the packages with goroutines (about 4 minutes on 2
# cores: not part of make test).
race:
	$(GO) test -race ./runtime/... ./stage/... ./search ./cmd/graphpipe ./tensor

fuzz:
	$(GO) test ./dag -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodePlan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzParseDevice$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeCluster$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeOpTimes$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plan -run '^$$' -fuzz '^FuzzDecodeSweep$$' -fuzztime $(FUZZTIME)
	$(GO) test ./search -run '^$$' -fuzz '^FuzzSearchDevice$$' -fuzztime $(FUZZTIME)
	$(GO) test ./search -run '^$$' -fuzz '^FuzzOpSeriesAt$$' -fuzztime $(FUZZTIME)
	$(GO) test ./microbatch -run '^$$' -fuzz '^FuzzParseAction$$' -fuzztime $(FUZZTIME)
	$(GO) test ./microbatch -run '^$$' -fuzz '^FuzzParseTrace$$' -fuzztime $(FUZZTIME)
	$(GO) test ./chart -run '^$$' -fuzz '^FuzzInspect$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tensor -run '^$$' -fuzz '^FuzzDecodeSafetensors$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tensor -run '^$$' -fuzz '^FuzzDecodeSafetensorsFrom$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeTensors$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/wire -run '^$$' -fuzz '^FuzzDecodeDeviceTensors$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime -run '^$$' -fuzz '^FuzzDecodeManifest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/supervise -run '^$$' -fuzz '^FuzzExpandHostlist$$' -fuzztime $(FUZZTIME)
	$(GO) test ./onnx -run '^$$' -fuzz '^FuzzImport$$' -fuzztime $(FUZZTIME)
	$(GO) test ./dataset -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/graphpipe -run '^$$' -fuzz '^FuzzDecodeRun$$' -fuzztime $(FUZZTIME)
	GRAPHPIPE_FAULTS=long $(GO) test ./cmd/graphpipe -run '^TestRandomFaults$$' -count=1 -v   # 20 faults over 5 runs on a pool (about 80 s)
	$(MAKE) loaded

# The cluster, pool, elastic and fault tests (their timing is what a loaded
# machine upsets) LOADED_COUNT times in a row, while a busy loop spins on
# every core for the whole of it (make fuzz runs it; tens of minutes on 2 cores).
LOADED_TESTS := Cluster|Pool|Elastic|Fault|Kill|Restart|Silent|Agent|Heartbeat|Stop|Signal
LOADED_COUNT ?= 5
loaded:
	@hogs=""; for i in $$(seq $$(nproc)); do yes > /dev/null & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs' EXIT INT TERM; \
	echo "$$(nproc) busy loops (pids$$hogs) while the tests run $(LOADED_COUNT) times"; \
	$(GO) test ./cmd/graphpipe ./runtime/... ./internal/natscluster -run '$(LOADED_TESTS)' -count=$(LOADED_COUNT) -failfast -timeout 120m

# Every shell block of README.md, in order, in a fresh temporary directory, as
# a new user would type them (the README's own first block builds graphpipe
# and puts bin/ on the PATH); train and run stop after README_STEPS steps
# (GRAPHPIPE_MAX_STEPS). Blocks marked readme-skip (a GPU, PyTorch, a NATS
# cluster) are skipped, saying why. Fails at the first command that fails.
README_STEPS ?= 20
readme:
	GRAPHPIPE_MAX_STEPS=$(README_STEPS) $(GO) run ./internal/readme/cmd/runreadme -repo . README.md

# The benchmark report: BENCHMARKS.md and bench/results/ (CSV; charts drawn
# with gonum/plot as SVG and PNG), every
# figure measured by the run that writes it. sgemm and CPU training are set
# against the system BLAS (loaded at run time, as graphpipe runs) and
# PyTorch where installed. bench: at most an hour on 2 cores; bench-quick: a
# few minutes.
REPORT := CGO_ENABLED=0 $(GO) run ./bench/cmd/report

bench:
	$(REPORT)

bench-quick:
	$(REPORT) -quick

# One section alone, put into the BENCHMARKS.md a full run wrote: the
# planner's scaling sweep (DLRM and MMT, 8 to 128 branches on 16 to 256
# a100; about half an hour on 2 cores).
bench-scaling:
	$(REPORT) -only scaling

# Real CPU runs of the small presets on 2 and 3 worker processes against
# the prediction from a profile of this machine (a few minutes).
bench-cpu-runs:
	$(REPORT) -only cpu-runs

# The Go benchmarks behind the report, one by one (go test -bench).
bench-go:
	$(GO) test ./bench -run '^$$' -bench . -benchtime 1x -timeout 60m
	$(GO) test ./cmd/graphpipe -run '^$$' -bench '^BenchmarkRecovery$$' -benchtime 1x   # a lost agent to training again, per phase

# Binaries for the GPU checks, to carry to a machine with a GPU and run
# there with bench/gpu/run.sh (no Go needed there).
gpu-build:
	mkdir -p build/gpu
	CGO_ENABLED=0 $(GO) build -ldflags="-s -w" -o build/gpu/graphpipe ./cmd/graphpipe
	CGO_ENABLED=0 $(GO) test -c -ldflags="-s -w" -o build/gpu/stage.test ./stage
	CGO_ENABLED=0 $(GO) test -c -ldflags="-s -w" -o build/gpu/kernel.test ./stage/internal/kernel
	CGO_ENABLED=0 $(GO) test -c -ldflags="-s -w" -o build/gpu/cuda.test ./tensor/cuda
	CGO_ENABLED=0 $(GO) test -c -ldflags="-s -w" -o build/gpu/graphpipe.test ./cmd/graphpipe

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin out

# Replay graphpipe train --dump runs in PyTorch (Debian's python3-torch at
# /usr/bin/python3): the small MMT, which has embeddings, attention, layer
# norms, residual adds and a concat, SGD with momentum and Adam, 50 steps
# each, with micro-batches; and the imported ONNX test models
# (onnx/testdata/models), 5 steps each from their exported weights (train
# --init), against the original PyTorch modules; and every small preset
# under the RECIPES below (AdamW, SGD with Nesterov, Adam with L2; the three
# schedules; clipping by the global norm); then replay-2bw (PipeDream-2BW's
# stale update). Each replay prints its largest relative difference and
# fails the target past 2e-4; its whole output is in out/replay/*.log.
TORCH_PY ?= /usr/bin/python3
# every small preset, 50 steps of each recipe (commas for spaces): AdamW with
# decoupled decay (biases and norm weights exempt), cosine schedule and
# clipping; SGD with Nesterov momentum, L2 decay, linear schedule and
# clipping; Adam with L2 decay and a constant rate after warm-up
PRESETS := mmt dlrm candle-uno case-study transformer mlp
RECIPES := --optimizer,adamw,--lr,0.001,--weight-decay,0.1,--no-decay-bias-norm,--lr-schedule,cosine,--warmup-steps,5,--clip-grad-norm,0.1,--micro-batch,8 \
	--optimizer,sgd,--lr,0.05,--momentum,0.9,--nesterov,--weight-decay,0.001,--lr-schedule,linear,--warmup-steps,5,--clip-grad-norm,0.1,--micro-batch,4 \
	--optimizer,adam,--lr,0.001,--weight-decay,0.01,--lr-schedule,constant,--warmup-steps,10,--micro-batch,8
IMPORTED := two_tower inception_block wide_deep residual_mlp
# PipeDream-2BW (--schedule 2bw, no flush, weights one update stale): the
# small MMT as a 3-stage pipeline that runs forwards of the next batch ahead
# of each update (run) and in one process (train), 20 steps with SGD, SGD
# with momentum and Adam: their final parameters within 1e-5 of each other,
# both within 2e-4 of W(t+1) = W(t) - lr·∇f(W(t-1)) replayed in PyTorch on
# the dumped batches, and neither within 1e-5 of synchronous training.
TWOBW := --optimizer,sgd,--lr,0.05 --optimizer,sgd,--lr,0.05,--momentum,0.9 --optimizer,adam,--lr,0.001
replay-2bw: build
	@mkdir -p out/replay
	@$(BIN) models export mmt --preset small -o out/replay/mmt.json > /dev/null 2>&1
	@for r in $(TWOBW); do \
	  flags=$$(echo $$r | tr , ' '); name=2bw-$$(echo $$r | cut -d, -f2)$$(echo $$r | grep -o momentum); d=out/replay/$$name; rm -rf $$d-*; \
	  $(BIN) run out/replay/mmt.json --devices 3 --device cpu --schedule 2bw --micro-batch 4 --steps 20 $$flags --dump $$d-run > /dev/null 2>&1 || exit 1; \
	  $(BIN) train out/replay/mmt.json --schedule 2bw --micro-batch 4 --steps 20 $$flags --dump $$d-train > /dev/null 2>&1 || exit 1; \
	  $(BIN) train out/replay/mmt.json --micro-batch 4 --steps 20 $$flags --dump $$d-sync > /dev/null 2>&1 || exit 1; \
	  $(TORCH_PY) stage/testdata/torch/same_final.py $$d-run $$d-train --tol 1e-5 || exit 1; \
	  $(TORCH_PY) stage/testdata/torch/same_final.py $$d-run $$d-sync --tol 1e-5 --differ || exit 1; \
	  for k in run train; do \
	    $(TORCH_PY) stage/testdata/torch/replay.py out/replay/mmt.json $$d-$$k $$flags --micro-batch 4 --schedule 2bw > $$d-$$k.log; s=$$?; \
	    echo "$$name $$k: $$(tail -1 $$d-$$k.log)"; [ $$s = 0 ] || exit $$s; \
	  done; \
	done

# graphpipe's bf16 on the CUDA emulator against PyTorch's CPU autocast
# (torch.autocast("cpu", dtype=torch.bfloat16)), from the same weights and
# batches, on every zoo preset at its small size: 10 Adam steps, each step's
# loss within 5e-3 relative. Both sides run every product on bf16 operands
# with float32 accumulation, but round at different places (autocast keeps a
# layer norm's output and the residual sums in float32 where graphpipe stores
# them in bf16): a step's loss moves by a few bf16 roundings of its terms,
# 2⁻⁹ relative each; 5e-3 is about 2.5 units of bf16's 2⁻⁸. Measured:
# 1.6e-3 at most (candle-uno). Needs Debian's python3-torch.
replay-bf16: build
	@mkdir -p out/replay-bf16
	@for m in $(PRESETS); do \
	  $(BIN) models export $$m --preset small -o out/replay-bf16/$$m.json > /dev/null || exit 1; \
	  b=$$($(BIN) inspect out/replay-bf16/$$m.json --json | $(TORCH_PY) -c 'import json,sys; print(json.load(sys.stdin)["batch_size"])'); \
	  GP=$(BIN) BACKEND=cuda-emulator TORCH_DEVICE=cpu PRESET=small PYTHON=$(TORCH_PY) OUT=out/replay-bf16/$$m MODEL=$$m STEPS=10 BATCH=$$b PRECISIONS=bf16 \
	    sh bench/gpu/train_vs_torch.sh > out/replay-bf16/$$m.log 2>&1 || { tail -5 out/replay-bf16/$$m.log; exit 1; }; \
	  d=$$(grep -o 'bf16 losses: largest relative difference [0-9.e+-]*' out/replay-bf16/$$m.log | awk '{print $$NF}'); \
	  echo "$$m (batch $$b): bf16 against PyTorch's CPU autocast, largest relative loss difference over 10 steps $$d"; \
	  $(TORCH_PY) -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 5e-3 else 1)" "$$d" || { echo "$$m: over 5e-3"; exit 1; }; \
	done

# torchvision's models that the importer once refused (issue 53), exported
# exactly as README.md says (onnx/testdata/torch/export.py, Debian's
# python3-torchvision), imported, trained 2 steps (batch 4, micro-batches of
# 2, SGD with momentum) and replayed against the original module within
# 2e-4. Needs /usr/bin/python3 with torch and torchvision; about 10 MB each.
TORCHVISION := mobilenet_v3_small vit_b_16
replay-torchvision: build
	@mkdir -p out/replay-torchvision
	@for m in $(TORCHVISION); do \
	  d=out/replay-torchvision/$$m; rm -rf $$d; mkdir -p $$d; \
	  $(TORCH_PY) onnx/testdata/torch/export.py $$m $$d/$$m.onnx > $$d/export.log 2>&1 || { tail -3 $$d/export.log; exit 1; }; \
	  args=$$($(TORCH_PY) -c "import json,sys; print(' '.join(json.load(open('onnx/testdata/models/'+sys.argv[1]+'.json'))['import_args']))" $$m) && \
	  $(BIN) import $$d/$$m.onnx -o $$d/$$m.json --weights $$d/$$m.safetensors --batch 4 $$args > $$d/import.log 2>&1 || { cat $$d/import.log; exit 1; }; \
	  $(BIN) train $$d/$$m.json --init $$d/$$m.safetensors --steps 2 --micro-batch 2 --optimizer sgd --lr 0.01 --momentum 0.9 --dump $$d/sgd > $$d/train.log 2>&1 || { tail -3 $$d/train.log; exit 1; }; \
	  $(TORCH_PY) onnx/testdata/torch/replay_module.py $$m $$d/sgd --optimizer sgd --lr 0.01 --momentum 0.9 --micro-batch 2 > $$d/replay.log 2>&1; s=$$?; \
	  echo "$$m: $$(grep -h -e '^losses' -e '^final' $$d/replay.log | paste -sd ';' | sed 's/;/; /')"; [ $$s = 0 ] || exit $$s; \
	done

replay: build
	@mkdir -p out/replay
	$(BIN) models export mmt --preset small -o out/replay/mmt.json
	rm -rf out/replay/sgd out/replay/adam
	$(BIN) train out/replay/mmt.json --steps 50 --optimizer sgd --lr 0.05 --momentum 0.9 --micro-batch 4 --dump out/replay/sgd
	$(TORCH_PY) stage/testdata/torch/replay.py out/replay/mmt.json out/replay/sgd --optimizer sgd --lr 0.05 --momentum 0.9 --micro-batch 4 > out/replay/mmt-sgd.log; s=$$?; tail -2 out/replay/mmt-sgd.log; exit $$s
	$(BIN) train out/replay/mmt.json --steps 50 --optimizer adam --lr 0.001 --micro-batch 8 --dump out/replay/adam
	$(TORCH_PY) stage/testdata/torch/replay.py out/replay/mmt.json out/replay/adam --optimizer adam --lr 0.001 --micro-batch 8 > out/replay/mmt-adam.log; s=$$?; tail -2 out/replay/mmt-adam.log; exit $$s
	@for m in $(PRESETS); do \
	  $(BIN) models export $$m --preset small -o out/replay/$$m.json > /dev/null || exit 1; \
	  for r in $(RECIPES); do \
	    flags=$$(echo $$r | tr , ' '); name=$$m-$$(echo $$r | cut -d, -f2)-$$(echo $$r | grep -o 'constant\|linear\|cosine'); rm -rf out/replay/$$name; \
	    $(BIN) train out/replay/$$m.json --steps 50 $$flags --dump out/replay/$$name > /dev/null 2>&1 || exit 1; \
	    $(TORCH_PY) stage/testdata/torch/replay.py out/replay/$$m.json out/replay/$$name $$flags > out/replay/$$name.log; s=$$?; \
	    echo "$$name: $$(grep -h -e '^clip_grad_norm_' -e '^final' out/replay/$$name.log | paste -sd ';' | sed 's/;/; /')"; [ $$s = 0 ] || exit $$s; \
	  done; \
	done
	@for m in $(IMPORTED); do \
	  args=$$($(TORCH_PY) -c "import json,sys; print(' '.join(json.load(open('onnx/testdata/models/'+sys.argv[1]+'.json'))['import_args']))" $$m) && \
	  $(BIN) import onnx/testdata/models/$$m.onnx -o out/replay/$$m.json --weights out/replay/$$m.safetensors --batch 12 $$args 2>/dev/null || exit 1; \
	  for opt in "sgd --lr 0.05 --momentum 0.9" "adam --lr 0.001"; do \
	    name=$$m-$${opt%% *}; rm -rf out/replay/$$name; \
	    $(BIN) train out/replay/$$m.json --init out/replay/$$m.safetensors --steps 5 --micro-batch 4 --optimizer $$opt --dump out/replay/$$name > /dev/null 2>&1 || exit 1; \
	    $(TORCH_PY) onnx/testdata/torch/replay_module.py $$m out/replay/$$name --micro-batch 4 --optimizer $$opt > out/replay/$$name.log 2>&1; s=$$?; \
	    echo "$$name: $$(tail -1 out/replay/$$name.log)"; [ $$s = 0 ] || exit $$s; \
	  done; \
	done
	# a user's data: the two-tower model trained as a 3-stage pipeline on 4800
	# teacher-labelled samples, evaluated on 1200 others; PyTorch evaluates
	# the exported weights and must print the run's evaluation within 1e-4
	@mkdir -p out/replay/data && rm -rf out/replay/data/ck
	$(BIN) import onnx/testdata/models/two_tower.onnx -o out/replay/data/tt.json --weights out/replay/data/tt.safetensors --loss softmax_cross_entropy --batch 12 2>/dev/null
	$(BIN) data synth out/replay/data/tt.json -o out/replay/data/train.safetensors --samples 4800
	$(BIN) data synth out/replay/data/tt.json -o out/replay/data/eval.safetensors --samples 1200 --skip 4800
	$(BIN) search out/replay/data/tt.json --devices 3 --device cpu --micro-batch 4 -o out/replay/data/plan.json > /dev/null
	$(BIN) run out/replay/data/plan.json --model out/replay/data/tt.json --init out/replay/data/tt.safetensors --data out/replay/data/train.safetensors \
	  --eval-data out/replay/data/eval.safetensors --epochs 1 --eval-every 200 --lr 0.001 --checkpoint out/replay/data/ck --json > out/replay/data/run.json
	$(BIN) export out/replay/data/ck -o out/replay/data/trained.safetensors
	$(TORCH_PY) onnx/testdata/torch/eval_module.py two_tower out/replay/data/trained.safetensors out/replay/data/eval.safetensors \
	  $$($(TORCH_PY) -c "import json; r=json.load(open('out/replay/data/run.json')); print('--loss %r --accuracy %r' % (r['eval_loss'], r['eval_accuracy']))")
	@$(MAKE) --no-print-directory replay-2bw

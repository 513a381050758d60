# pykueue — developer entry points. `make help` lists them.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
KUBECTL := $(CURDIR)/.k8sbin/current/kubectl
HELM_VERSION := $(shell awk '$$1=="require" && $$2=="helm.sh/helm/v4"{print $$3}' hack/tools/helm/go.mod)
HELM := $(or $(PYKUEUE_HELM_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pykueue/helm)/$(HELM_VERSION)/helm
# The lab's kubeconfig, where hack/lab.py puts it (LAB_STATE_DIR moves the lab's state).
export KUBECONFIG := $(abspath $(or $(LAB_STATE_DIR),$(CURDIR)/.lab))/kubeconfig

.PHONY: help multikueue-lab-up multikueue-lab-down multikueue-interop run-multikueue kueuectl helm chart chart-lint release-manifest browser faults bench-lab bench-flood bench-versus bench-versus-large bench-deep bench-cq-scaling bench-cache-touch bench-kinds kueue operators operators-up operators-down conformance conformance-kueue crds webhooks pykueue-up pykueue-down setup controlplane lab-up lab-down lab-status test test-unit test-integration lint certs run bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

# setuptools' generic notice on editable installs ("Editable installation. Please be careful
# with folders ...") is a warning box in every fresh install's output: filtered by its message.
$(BIN)/pykueue: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install -q -e '.[dev,plot]'
	@touch $@

setup: $(BIN)/pykueue ## create .venv and install pykueue with its dev tools

controlplane: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok from Go modules (no-op when built)
	bash hack/build-controlplane.sh

certs: setup ## generate the CA, serving certificate and kube-scheduler's extender client certificate into certs/out (kept while valid)
	$(BIN)/python -m certs.generate --out certs/out --client kube-scheduler-client=system:kube-scheduler

lab-up: setup controlplane ## start the local control plane on 127.0.0.1 and print the nodes
	$(BIN)/python hack/lab.py up
	$(KUBECTL) get nodes -o wide

run: lab-up operators ## the main job: lab + operators + pykueue (webhook, extender) + the seed scenario, narrated
	$(BIN)/python hack/lab.py operators-up --skip-busy $(RUN_OPERATORS)
	$(BIN)/python hack/lab.py pykueue-up
	$(BIN)/python hack/scenario.py

pykueue-up: lab-up ## start pykueue in the lab under its ServiceAccount, register webhook and extender
	$(BIN)/python hack/lab.py pykueue-up

multikueue-lab-up: setup controlplane ## three labs (manager + two workers) with pykueue on each, the workers registered on the manager (docs/multikueue.md)
	$(BIN)/python hack/multikueue_lab.py up

multikueue-lab-down: ## stop the three MultiKueue labs and remove their state
	$(BIN)/python hack/multikueue_lab.py down

multikueue-interop: setup controlplane kueue ## MultiKueue with real Kueue v0.17.1 both ways (pykueue manager -> Kueue worker, Kueue manager -> pykueue worker): step table + latencies; needs root
	$(BIN)/python hack/multikueue_interop.py $(INTEROP_ARGS)

run-multikueue: setup controlplane ## narrated MultiKueue scenario on three labs: A100 and L4 workers, a burst, a worker stopped and its Workloads requeued (timeline)
	$(BIN)/python hack/multikueue_scenario.py $(RUN_MK_ARGS)

pykueue-down: ## stop pykueue, unregister its webhooks, plain kube-scheduler again
	$(BIN)/python hack/lab.py pykueue-down

webhooks: certs ## render the lab webhook configurations with caBundle into .lab/webhooks.yaml
	$(BIN)/python hack/render_webhooks.py --variant lab --port $${PYKUEUE_PORT:-9443}

bench: setup ## benchmarks (core cycle, simulator, ETA, webhook, extender); JSON on stdout
	$(BIN)/python bench/core_cycle.py
	$(BIN)/python bench/simulate.py
	$(BIN)/python bench/eta_cost.py
	$(BIN)/python bench/eta_accuracy.py
	$(BIN)/python bench/webhook_latency.py
	$(BIN)/python bench/extender_latency.py

bench-lab: setup controlplane ## Kueue's baseline through the reconciler on a private lab; JSON on stdout
	$(BIN)/python bench/lab_baseline.py

operators: ## build JobSet, training-operator, mpi-operator, KubeRay, LeaderWorkerSet, Kubeflow Trainer v2, AppWrapper, spark-operator (+ Spark jars) from Go modules into ~/.cache/pykueue/operators, with their CRDs (no-op when built)
	bash hack/build-operators.sh

operators-up: lab-up operators ## install the operators' CRDs into the lab and start them out of cluster (logs in the lab's logs/)
	$(BIN)/python hack/lab.py operators-up

operators-down: ## stop the operators and unregister their webhooks
	$(BIN)/python hack/lab.py operators-down

kueuectl: ## build only Kueue's kubectl plugin kueuectl v0.17.1 into ~/.cache/pykueue/kueue (no-op when built; part of make test)
	bash hack/build-kueue.sh kueuectl

kueue: ## build Kueue v0.17.1 (manager, minimalkueue, perf runner, checker) from Go modules into ~/.cache/pykueue/kueue (no-op when built; ~12 min cold)
	bash hack/build-kueue.sh

bench-flood: setup controlplane ## one tenant's flood of 3,000 Jobs vs another team's probe Job on a private lab; JSON on stdout
	$(BIN)/python bench/flood.py $(FLOOD_ARGS)

bench-versus-large: setup controlplane kueue ## Kueue's large-scale scenario (1,000 ClusterQueues, 50,000 Workloads) with its CI thresholds, same runner; long (about an hour per target)
	$(BIN)/python bench/versus.py --generator bench/scenarios/versus-large.yaml --rangespec bench/scenarios/versus-large-rangespec.yaml $(VERSUS_ARGS)

bench-kinds: lab-up operators ## per job kind, seconds from admission to its pods Running on the lab (starts pykueue and the operators as make run); table + JSON
	$(BIN)/python hack/lab.py operators-up --skip-busy $(RUN_OPERATORS)
	$(BIN)/python hack/lab.py pykueue-up
	$(BIN)/python bench/kinds_latency.py $(KINDS_ARGS)
bench-deep: setup controlplane kueue ## deep queues (issue 33): bench/scenarios/versus-deep.yaml, Kueue's manager and pykueue; admissions/min, time to admission, idle quota; DEEP_ARGS e.g. --per-cq 100
	$(BIN)/python bench/deep.py $(DEEP_ARGS) --runs kueue,pykueue $(VERSUS_ARGS)

bench-cq-scaling: setup ## simulator: CPU per admission at 30, 300, 1,000, 3,000 ClusterQueues (same Workloads per queue); JSON on stdout
	$(BIN)/python bench/cq_scaling.py

bench-cache-touch: setup ## the per-admission touch pattern of bench-cq-scaling without the core's logic, at 30 and 3,000 queues (what the memory costs); JSON on stdout
	$(BIN)/python bench/cache_touch.py

bench-versus: setup controlplane kueue ## Kueue's perf runner vs minimalkueue, Kueue's manager and pykueue, each on a fresh lab; table + JSON
	$(BIN)/python bench/versus.py $(VERSUS_ARGS)

conformance: setup controlplane ## the conformance suite (API only) against pykueue on a private lab (also in make test)
	PYKUEUE_CONFORMANCE_TARGET=pykueue $(BIN)/pytest -q tests/conformance

conformance-kueue: setup controlplane kueue ## the same suite against real Kueue v0.17.1 (manager + webhooks) on a private lab; needs root
	PYKUEUE_CONFORMANCE_TARGET=kueue $(BIN)/pytest -q tests/conformance

faults: setup controlplane ## fault injection, long version (apiserver kill -9, etcd SIGSTOP 15 s, leader kill -9, 5,000 updates of a Job), invariants every 100 ms; prints the table
	PYKUEUE_FAULTS=long $(BIN)/pytest -q -s tests/integration/test_faults.py

lab-down: ## stop every lab process and remove its state
	@if [ -x $(BIN)/python ]; then $(BIN)/python hack/lab.py down; else $(PY) hack/lab.py down; fi

lab-status: ## show which lab processes run
	$(BIN)/python hack/lab.py status

browser: ## Debian's chromium for the dashboard's browser tests (apt-get; a no-op when installed)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "browser: chromium is missing and cannot be installed here (needs root and" \
	    "apt-get); the dashboard's browser tests will skip"; fi; }

test: setup controlplane browser ## all tests: unit, integration and e2e (starts the lab itself when it is not up; the operators' tests start them); builds the operators, Helm and kueuectl behind the first tests (hack/test.sh; PYTEST_ARGS go to pytest)
	bash hack/test.sh $(PYTEST_ARGS)

test-unit: setup browser ## unit tests only (no cluster)
	$(BIN)/pytest -q tests/unit

helm: ## build Helm v4 (helm.sh/helm/v4/cmd/helm) from Go modules into ~/.cache/pykueue/helm (no-op when built)
	bash hack/build-helm.sh

chart: setup controlplane ## regenerate charts/pykueue's templates and values.yaml from the kustomize build of manifests/
	KUBECTL=$(KUBECTL) $(BIN)/python hack/gen_chart.py

chart-lint: setup controlplane helm ## the chart up to date with manifests/, `helm lint`, `helm template` (default values and every option)
	KUBECTL=$(KUBECTL) $(BIN)/python hack/gen_chart.py --check
	$(HELM) lint --strict charts/pykueue
	$(HELM) template pykueue charts/pykueue >/dev/null
	$(HELM) template pykueue charts/pykueue --set certManager.enable=true --set webhook.caBundle=Cg== >/dev/null

release-manifest: controlplane ## dist/pykueue.yaml and dist/pykueue-cert-manager.yaml: the one-file installs (`kubectl apply --server-side -f`)
	KUBECTL=$(KUBECTL) bash hack/release-manifest.sh

lint: setup ## ruff, the import-linter contracts, generated CRDs and chart up to date, helm lint (when built)
	$(BIN)/ruff check app tests hack bench certs
	$(BIN)/lint-imports
	$(BIN)/python hack/gen_crds.py --check
	@# The chart checks when their tools are there (`make chart-lint` builds them).
	@if [ -x $(KUBECTL) ]; then KUBECTL=$(KUBECTL) $(BIN)/python hack/gen_chart.py --check; \
	else echo "lint: $(KUBECTL) missing (make controlplane): charts/pykueue not checked"; fi
	@if [ -x $(HELM) ]; then $(HELM) lint --strict --quiet charts/pykueue; \
	else echo "lint: $(HELM) missing (make helm): helm lint skipped"; fi

crds: setup ## regenerate manifests/crds from hack/gen_crds.py
	$(BIN)/python hack/gen_crds.py

clean: lab-down ## remove the lab state and build outputs (keeps .k8sbin and the Go caches)
	rm -rf build dist *.egg-info .pytest_cache

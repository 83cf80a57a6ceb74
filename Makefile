# One-command set-up: `make run` serves, `make test` tests. Both install from scratch.
# The interpreter the venv is made from: the system's own CPython when it is 3.11 or newer
# and can make a venv, else the first python3 on PATH. Distributions build theirs with
# profile-guided and link-time optimisation; on a plain source build (pyenv's default) a send
# takes 14-16% more CPU (docs/performance.md, "The interpreter"). `make PYTHON=...` picks
# another; an existing .venv keeps its interpreter until `make clean`.
SYSTEM_PYTHON := /usr/bin/python3
PYTHON ?= $(shell $(SYSTEM_PYTHON) -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' \
                  2>/dev/null && echo $(SYSTEM_PYTHON) || echo python3)
VENV   := .venv
UV     := $(VENV)/bin/uv
UV_VERSION := 0.13.8
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: install run test bench eval lint clean protos

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# `make run` installs the runtime dependencies only; `make test`, `lint`, `bench` and `eval`
# add the dev tools (the dependency group "dev").
$(VENV)/.runtime: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --inexact --no-dev --quiet
	touch $@

$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --inexact --quiet
	touch $(VENV)/.runtime $@

install: $(VENV)/.installed

# `make run` serves the gRPC binding too, on 50051 unless GATEWAY_GRPC_PORT says otherwise.
run: $(VENV)/.runtime
	GATEWAY_GRPC_PORT=$${GATEWAY_GRPC_PORT:-50051} $(VENV)/bin/gateway serve

# The gRPC binding's stubs, generated from its proto and shipped (tests/test_grpc_stubs.py).
protos: install
	$(VENV)/bin/python -m tests.grpc_stubs gateway/grpcapi/proto

# The at-rest tests of a Redis given by URL (the others start their own embedded Redis).
AT_REST_ON_CLUSTER := $(addprefix tests/test_at_rest_sealing.py::test_,content_is_sealed_in_every_redis_value \
    a_value_moved_to_another_user_or_context_does_not_open registered_agents_are_sealed_too) \
    $(addprefix tests/test_at_rest_rotation.py::test_,rotation_with_two_keys \
    rotate_data_from_the_command_line) \
    $(addprefix tests/test_at_rest_vectors.py::test_,context_memory_searches_sealed_vectors \
    vectors_indexed_in_clear_keep_working_until_rotation_seals_them)
CLUSTER_SUITE := tests/test_send.py tests/test_tasks.py tests/test_contexts.py \
                 tests/test_isolation.py tests/test_durability.py tests/test_memory_embedders.py \
                 tests/test_memory_search.py tests/test_memory_models.py \
                 tests/test_longterm_recall.py tests/test_longterm_store.py \
                 tests/test_longterm_scrub.py tests/test_longterm_identity.py \
                 tests/test_longterm_subjects.py tests/test_longterm_erasure.py \
                 tests/test_registry_agents.py tests/test_registry_api_keys.py \
                 tests/test_registry_allowlist.py tests/test_durability_edges.py \
                 tests/test_run_policy.py tests/test_binding_isolation.py tests/test_a2a_v1.py \
                 tests/test_streaming.py tests/test_streaming_replicas.py tests/test_stream_capacity.py \
                 tests/test_push_delivery.py tests/test_push_configs.py tests/test_push_cluster.py \
                 tests/test_background_embedding.py tests/test_search_consistency.py \
                 tests/test_embed_handoff.py tests/test_stream_consumer.py \
                 tests/test_sealing_keys.py tests/test_audit.py \
                 tests/test_client_context_ids.py $(AT_REST_ON_CLUSTER)

# The linters first (ruff, the complexity cap, mypy strict): CI runs `make test` only.
test: install lint
	$(VENV)/bin/pytest -n 2 --dist loadfile --cov=gateway --cov-report=
	GATEWAY_TEST_CLUSTER=1 $(VENV)/bin/pytest -n 2 --dist loadfile --cov=gateway --cov-append \
		--cov-report=term:skip-covered --cov-fail-under=90 $(CLUSTER_SUITE)

bench: install
	$(VENV)/bin/python -m bench

# Retrieval quality of context memory: recall@1, recall@5, MRR per embedder and mode.
eval: install
	$(VENV)/bin/python -m eval

lint: install
	$(VENV)/bin/ruff check gateway tests bench eval
	$(VENV)/bin/ruff format --check gateway tests bench eval
	$(VENV)/bin/mypy gateway tests bench

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache

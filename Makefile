# Two entry points for a newcomer: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TAPT := $(VENV)/bin/tapt
DEMO := .cache/demo
DOMAIN ?= medical
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup demo test test-slow docs docs-serve clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,ray]"
	touch $@

test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

# The documentation site (docs/ + mkdocs.yml) into site/; warnings are errors. Run through
# `python -m`: the `mkdocs` script would put .venv/bin first on sys.path, where the API reference
# would find the `tapt` console script instead of the package.
docs: setup
	$(PY) -m mkdocs build --strict --site-dir site

docs-serve: setup
	$(PY) -m mkdocs serve

# Index the bundled sample once (cached), select for one domain's seeds four ways, score them.
demo: setup $(DEMO)/index/manifest.json
	@for m in centroid knn iforest fused; do \
	  $(TAPT) -q select $$m $(DEMO)/index --task data/sample/seeds/$(DOMAIN).jsonl.gz \
	    --budget $$($(PY) -m tapt.retriever.evaluation.oracle_count $(DEMO)/index domain $(DOMAIN))sent \
	    --out $(DEMO)/$$m.jsonl || exit 1; \
	done
	@echo
	@echo "Selections for the '$(DOMAIN)' seeds, budget = the domain's size in the sample:"
	@$(TAPT) -q eval $(DEMO)/centroid.jsonl $(DEMO)/knn.jsonl $(DEMO)/iforest.jsonl $(DEMO)/fused.jsonl \
	  --index $(DEMO)/index --label-field domain --label $(DOMAIN)

$(DEMO)/index/manifest.json: data/sample/pool.jsonl.gz | setup
	$(TAPT) index build data/sample/pool.jsonl.gz --out $(DEMO)/index --no-split --overwrite

clean:
	rm -rf $(DEMO) .pytest_cache site

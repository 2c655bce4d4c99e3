# The README's two commands. Each creates .venv and installs what it needs on a fresh machine
# that has only python3, pip and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
OUT ?= hpml-out
PYTEST_ARGS ?=

.PHONY: bench test install lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[suites,dev,plots,nvml,dashboard,arrays]'
	touch $(STAMP)

# The suites with the report, on whatever device is present (full profile with a GPU, quick
# without). Serial on purpose: parallel workers would disturb each other's timings. Each bench
# is one save of the labs' history in $(HISTORY) (its own process only: a save's extra
# processes would triple the bench), and the dashboard of that history is written beside the
# report, whether the labs passed or not; the exit status is the labs'.
HISTORY ?= $(OUT)/baselines
bench: $(STAMP)
	$(BIN)/python -m pytest suites --hpml-report=$(OUT)/report.md --hpml-plots=$(OUT)/plots \
		--hpml-export-benchmark-action=$(OUT)/benchmark-action.json \
		--hpml-save-baseline --hpml-baselines=$(HISTORY) --hpml-baseline-processes=1 \
		$(PYTEST_ARGS); status=$$?; \
	$(BIN)/python -m pytest_hpml dashboard $(HISTORY) -o $(OUT)/dashboard; exit $$status

# Every test: the plugin's own tests and every lab in the quick profile, under xdist.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n auto --hpml-profile quick -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(OUT) *.egg-info

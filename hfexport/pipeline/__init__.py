"""The stages the parent process runs, in order: `resolve` → `fetch` → `plan` → `export` (which
hands each backend to an isolated worker, `hfexport/worker/`) → `package`. Each module opens with
its stage and reads the dataclass the previous one produced."""

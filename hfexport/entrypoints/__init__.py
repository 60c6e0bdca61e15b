"""The ways in: the Python API (`api.py`: `export`, `push`), the command line (`cli.py`, with
`console.py` for what it prints), the offline demo (`demo.py`) and the Hub webhook service
(`service/`). The GitHub Action's adapter is `action/entrypoint.py` at the repository root. These
modules only chain the stages; nothing below them imports them."""

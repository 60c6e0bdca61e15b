"""Publishing to the Hub: the code that reads a repo's state and writes our pull request.

`retry.py` is the one retry policy of every Hub call; `state.py` reads the repo's state once,
`decide.py` decides (pure) and `publish.py` applies the writes for the destination. What the card
says is `hfexport/card/`'s.
"""

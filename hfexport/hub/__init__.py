"""Publishing to the Hub: the code that reads a repo's state and writes our pull request.

`retry.py` is the one retry policy of every Hub call; `publish.py` reads the state once, decides
(pure) and applies the writes; `card.py` renders our model-card section and merges our tags.
"""

"""What the model card says: our section, its "How to load" programs and the front matter's tags.

`section.py` renders the section between our markers and the derived repo's card, `where.py` its
first table (which file to take where, from what was measured), `snippets.py` the
code block of each loader (`programs.py` the parts every block is made of, `executorch.py` those of
ExecuTorch's own LLM runner), `frontmatter.py` the YAML edited as text. Text only: nothing here talks
to the Hub. `hub/` decides when and where the card is published.
"""

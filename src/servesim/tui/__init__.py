"""The terminal dashboard (``servesim dashboard``): a live run rendered with Textual."""

"""Searches over ``GNMT.step``: beam search with eq. 14 (section 7), greedy search, sampling, scoring."""

"""Answer quality per routing program: the held-out evaluation set, routed answers, scores, operating points."""

"""A serve config's model pair: what ``pair:`` fills in (:mod:`trserve.pairs.fill`) and the start-up check that
pair-specific artifacts meet the models they were made for (:mod:`trserve.pairs.check`)."""

def _check_exports(_public):
    assert set(__all__) == _public, (set(__all__) - _public, _public - set(__all__))

    # Verify that all exported strategy functions were registered with
    # @declares_strategy.

    existing_strategies = set(_all_strategies) - {"_maybe_nil_uuids"}

    exported_strategies = set(__all__) - {
        "DataObject",
        "DrawFn",
        "SearchStrategy",
        "composite",
        "register_type_strategy",
    }
    assert existing_strategies == exported_strategies, (
        existing_strategies - exported_strategies,
        exported_strategies - existing_strategies,
    )

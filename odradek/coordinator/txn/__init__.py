"""The transaction coordinator: a pure, replayable state machine over ``__transaction_state``.

See docs/transactions.md; the runtime's entry point is ``coordinator.TransactionCoordinator``.
"""

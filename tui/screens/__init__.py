"""The console's screens: the run screen (``run``, drawn by ``watch``: the App's default), the detail
view of a window or row (``detail``), the sweep view (``sweep``) and the modal dialogs (``dialogs``).
A screen holds its panes (tui.widgets), hands them snapshots and runs the operator's verbs."""

"""The console's widgets, one module per concern: tables updated cell by cell (``tables``), the boot
log with highlights and search (``log``), text panels and the reps' bars (``panels``), the modal
screens (``dialogs``), and segments to styled text (``text``). They render what ``tui.core`` derived
and hold no campaign state; every use of Textual's private API is in ``_textual_hacks``."""

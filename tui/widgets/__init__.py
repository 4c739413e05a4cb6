"""The console's widgets, one module per pane of the run screen: the header (``head``), the windows
list (``windows``), the reps and their chart (``reps``, ``chart``), the log (``logbox`` around
``log``), the boot facts (``facts``), the end-of-run banner (``banner``), the status line
(``status``) and the ``:`` line (``command``). Each watches the snapshot it is handed (``view``) and
draws itself with what ``tui.core`` derives; each posts messages up and holds no campaign state. The
shared parts: tables updated cell by cell (``tables``), text panels and the reps' bars (``panels``),
segments to styled text (``text``); every use of Textual's private API is in ``_textual_hacks``."""

"""A server as one Slurm batch job per window, on whatever node the scheduler (or the session's
place) gives it.

The job is a script ruler writes and keeps (``job.sh``): it picks a free port on its node, says
where it runs in a small file beside it (``job.place``), then starts the server (the campaign's
command, a ``docker run`` on the node, or pyxis' ``srun --container-image``) with its output in the
window's ``boot.log``. Everything between ruler and the job goes through the results directory, so
that directory must be on a filesystem the nodes share; ruler checks that before the first window.

Ruler reads Slurm only through its machine-readable outputs: ``sbatch --parsable``, ``squeue
--json`` to find a run's jobs (resume) and ``scontrol -o show job`` (one ``key=value`` line per job;
Slurm 22.05 has no ``--json`` there) for one job's state while it runs and its final record, read
within seconds of its end, while Slurm remembers the job (``MinJobAge``, 300 s by default).
``sacct`` is not used: it needs accounting (slurmdbd), which many clusters and CI's single-node one
lack, and the record is taken long before it matters.

Three modules:

* :mod:`engine.runtime.slurm.commands` -- Slurm's commands (sbatch, squeue, scontrol, sinfo,
  scancel) and the parsers of what they print;
* :mod:`engine.runtime.slurm.script` -- the job script and its ``#SBATCH`` options;
* :mod:`engine.runtime.slurm.server` -- a window's job while it runs, and the runtime.
"""

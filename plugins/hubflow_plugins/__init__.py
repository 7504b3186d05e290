"""hubflow's Airflow-side code as ordinary Python modules (Airflow puts ``plugins/`` on ``sys.path``).

``checkpoint_inspector``, ``archive``, ``health``, ``job_control`` and ``rewind`` are plain libraries
with no Airflow import, so they can be used from a shell, a test or a Spark driver as well as from
the operators and sensors. What a job and its supervisors share - the status folder's files, the job
states, the lease and the STOP/KILL/HOLD markers - is imported from the jobs runtime package
(``hubflow_jobs.status``, installed as ``hubflow-jobs``; it imports no Spark), never copied.
"""

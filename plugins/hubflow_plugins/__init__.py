"""hubflow's Airflow side, laid out like a provider package (Airflow puts ``plugins/`` on ``sys.path``).

Hooks own connections and I/O, operators are thin (read parameters, call the control plane, report),
sensors and triggers judge and wait, notifications carry alerts, the status page serves the jobs'
progress, and the DAG factory builds every DAG from the registry. What to do for a job - supervision
decisions, health verdicts, job control, rewind, archive, alert decisions - is the control plane's
(``hubflow``, which imports no Airflow), imported from there, never copied.
"""

"""hubflow's Airflow-side code as ordinary Python modules (Airflow puts ``plugins/`` on ``sys.path``).

``checkpoint_inspector`` and ``archive`` are plain libraries with no Airflow import, so they can be
used from a shell, a test or a Spark driver as well as from the operators and sensors.
"""

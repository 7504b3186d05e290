"""The runtime of a job's driver: its Spark session (:mod:`.session`), the loop that starts,
supervises and stops its queries (:mod:`.runner`, :mod:`.query_group`, :mod:`.query_start`), the
listener that keeps status.json current (:mod:`.listener`), graceful stop (:mod:`.stop`), the
watchdog that renews the lease and obeys kill requests (:mod:`.watchdog`), waiting for executors
(:mod:`.executors`), and how a driver is started detached with its log kept (:mod:`.detached_process`,
:mod:`.driver_log`). Spark is imported only inside what runs in the driver.
"""

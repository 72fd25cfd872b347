package workqueue_test

const helperEnv = "LANEQ_WORKQUEUE_HELPER"

func runHelperProcess() int { return 0 }

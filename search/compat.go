package search

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// Forwards to the names that moved to package plan (and ModelHash to dag).
// temporary: removed once every branch of issue 20 is merged.

const (
	PlanFormat      = plan.PlanFormat
	MaxDevices      = plan.MaxDevices
	MicroBatchLimit = plan.MicroBatchLimit
	DeviceFormat    = plan.DeviceFormat
	OpTimesFormat   = plan.OpTimesFormat
)

type (
	Plan         = plan.Plan
	ModelRef     = plan.ModelRef
	PlanStage    = plan.PlanStage
	PlanEdge     = plan.PlanEdge
	Prediction   = plan.Prediction
	SearchReport = plan.SearchReport
	Baseline     = plan.Baseline
	PlanError    = plan.PlanError
	Device       = plan.Device
	OpTimes      = plan.OpTimes
	OpSeries     = plan.OpSeries
	OpTimesError = plan.OpTimesError
)

var (
	ModelHash     = dag.ModelHash
	DecodePlan    = plan.DecodePlan
	LoadPlan      = plan.LoadPlan
	Profiles      = plan.Profiles
	ProfileNames  = plan.ProfileNames
	LookupDevice  = plan.LookupDevice
	EncodeDevice  = plan.EncodeDevice
	ParseDevice   = plan.ParseDevice
	DecodeOpTimes = plan.DecodeOpTimes
	OpsHash       = plan.OpsHash
	DeviceList    = plan.DeviceList
)

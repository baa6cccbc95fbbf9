// Package chart draws graphpipe's pictures with gonum.org/v1/plot, in one
// style, as SVG or PNG: line charts for the benchmark report (Line),
// pipeline timelines for the simulator and the runtime (Timeline), and
// Gantt charts of a sweep's jobs on a cluster (Gantt).
//
// The contract:
//
//  1. Every chart has a title, axis titles with their units and a legend
//     outside the plotting area; ticks come from the library's tickers or,
//     on log axes, at 1, 2 and 5 per decade.
//  2. A timeline has a time axis in milliseconds and one row per stage,
//     named as the caller says (with its devices); each row shows the
//     stage's forwards, backwards and weight gradients in one lane, and
//     below it its sends and its receives, each in a colour the legend
//     names; the stage's idle time, its share of the bubble, is shaded.
//     Timelines drawn together (Timelines) share one time axis, one above
//     the other: a plan's simulated and measured iterations.
//  3. A Gantt chart has a time axis in seconds and one row per device,
//     device 0 at the top; each job is a bar over the devices it holds from
//     its start to its end, named in the legend (and on the bar where it
//     fits), in the same colour in every chart drawn with it (Gantts: a
//     sweep planned and as it ran, one above the other).
//  4. Render, Timelines and Gantts return the file's bytes; the caller writes them.
//     Text is set in the Liberation fonts the library embeds, so drawing
//     needs no fonts on the machine. A PNG carries the chart's title and axis
//     titles as iTXt chunks (Title, Description), which image decoders skip.
//
// The package does no I/O and keeps no state between calls.
package chart

package plan

import "testing"

func TestDeviceList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{[]int{3}, "3"}, {[]int{0, 1, 2}, "0-2"}, {[]int{0, 1, 2, 7, 9, 10}, "0-2,7,9-10"}, {[]int{4, 6}, "4,6"}} {
		if got := DeviceList(tc.in); got != tc.want {
			t.Errorf("DeviceList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

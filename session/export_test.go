package session

// SpendLock is spendLock, for the tests that hold a budget's lock.
var SpendLock = spendLock
